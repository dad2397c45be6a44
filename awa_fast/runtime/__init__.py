"""Running jobs: claiming, executing handlers, committing outcomes, lifecycle hooks."""
