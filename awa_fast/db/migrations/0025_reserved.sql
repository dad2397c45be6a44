-- Reserved: the schema change numbered 0025 is written on another branch, and replaces
-- this file when the two meet. Until then it changes nothing, so that the versions here
-- run 1..n without a gap.
SELECT 1;
