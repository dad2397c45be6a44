//! Every interleaving of the ring's protocol steps, up to small bounds, run on the real code:
//! push (reserve, claim, write, publish), consumer stall checks and skips, and pops.
//!
//! Each producer is a thread that stops before each push, at every [`Pause`] point of the push
//! and whenever the ring is full, until the explorer lets it take one step or kills it there
//! (its fake pid is marked gone and the thread unwinds). Between steps the explorer may let
//! the consumer wait out a stall timeout and pop what is ready. The explorer runs every
//! schedule depth first; after each, the survivors finish, the consumer drains, and the
//! outcome is checked: every record whose push returned is popped exactly once, intact and
//! in its producer's order; nothing else is popped; the ring ends empty.
//!
//! Steps are interleaved whole: the orderings inside a step are the subject of the module
//! docs' memory-ordering argument, not of this check.

use super::process::fake_process;
use super::*;
use std::cell::RefCell;
use std::panic;
use std::sync::mpsc::{self, Receiver, SyncSender};
use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::Instant;

/// Where a model producer waits for the explorer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Point {
    Start,
    Ring(Pause),
    Full,
    Done,
}

/// Unwinds a killed producer's thread (through `resume_unwind`: no panic message).
struct Killed;

std::thread_local!(
    static STEP: RefCell<Option<(SyncSender<Point>, Receiver<bool>)>> = const { RefCell::new(None) }
);

/// Reports `point` and waits to be let go (true) or killed (false).
fn stop_at(point: Point) {
    let go = STEP.with_borrow(|s| {
        let (at, go) = s.as_ref().expect("only model producers push");
        at.send(point).unwrap();
        go.recv().unwrap()
    });
    if !go {
        panic::resume_unwind(Box::new(Killed));
    }
}

fn record(producer: usize, i: usize, len: usize) -> (Outcome, Vec<u8>) {
    let id = (producer * 100 + i) as i64;
    let rec = Outcome {
        job_id: id,
        run_lease: i as i64,
        code: 1,
        kind: producer as u32,
        number: 0.5,
    };
    (rec, (0..len).map(|b| (b as i64 + id) as u8).collect())
}

struct Actor {
    at: Point,
    pid: u32,
    go: SyncSender<bool>,
    points: Receiver<Point>,
    handle: Option<JoinHandle<()>>,
    /// Records whose push returned.
    pushed: usize,
    dead: bool,
    /// The consumer's tick count when this producer found the ring full: only a later tick
    /// can make room, so stepping it before one would loop.
    full_since: usize,
}

impl Actor {
    fn spawn(ring: &Arc<OutcomeRing>, records: Vec<(Outcome, Vec<u8>)>) -> Self {
        let (at_tx, points) = mpsc::sync_channel(1);
        let (go, go_rx) = mpsc::sync_channel(1);
        let pid = fake_process::fresh();
        let ring = Arc::clone(ring);
        let handle = thread::spawn(move || {
            fake_process::assume(pid);
            STEP.set(Some((at_tx.clone(), go_rx)));
            stop_at(Point::Start);
            for (rec, payload) in &records {
                while !ring.try_push(rec, payload).expect("a live producer's push") {
                    stop_at(Point::Full);
                }
            }
            at_tx.send(Point::Done).unwrap();
        });
        let at = points.recv().unwrap();
        Actor {
            at,
            pid,
            go,
            points,
            handle: Some(handle),
            pushed: 0,
            dead: false,
            full_since: 0,
        }
    }

    fn active(&self) -> bool {
        !self.dead && self.at != Point::Done
    }

    fn step(&mut self, ticks: usize) {
        if self.at == Point::Ring(Pause::Written) {
            self.pushed += 1; // this step publishes it
        }
        self.go.send(true).unwrap();
        self.at = self.points.recv().unwrap();
        self.full_since = ticks;
        if self.at == Point::Done {
            self.handle.take().unwrap().join().unwrap();
        }
    }

    fn kill(&mut self) {
        fake_process::kill(self.pid);
        self.go.send(false).unwrap();
        let unwound = self.handle.take().unwrap().join().unwrap_err();
        assert!(unwound.is::<Killed>());
        self.dead = true;
    }
}

#[derive(Clone, Copy, Debug)]
enum Choice {
    Step(usize),
    Kill(usize),
    Tick,
}

/// One system under exploration: producers, the consumer's clock and what it popped.
struct World {
    ring: Arc<OutcomeRing>,
    actors: Vec<Actor>,
    records: Vec<Vec<(Outcome, Vec<u8>)>>,
    now: Instant,
    popped: Vec<(Outcome, Vec<u8>)>,
    ticks: usize,
    ticked: usize,
    kills: usize,
}

const STALL: Duration = Duration::from_secs(2);

impl World {
    fn new(capacity: usize, lens: &[&[usize]], ticks: usize, kills: usize) -> Self {
        let ring = Arc::new(OutcomeRing::new(capacity, 64, STALL).unwrap());
        ring.pause_at(|at, _| stop_at(Point::Ring(at)));
        let records: Vec<Vec<_>> = lens
            .iter()
            .enumerate()
            .map(|(p, ls)| {
                ls.iter()
                    .enumerate()
                    .map(|(i, &l)| record(p, i, l))
                    .collect()
            })
            .collect();
        let actors = records
            .iter()
            .map(|r| Actor::spawn(&ring, r.clone()))
            .collect();
        World {
            ring,
            actors,
            records,
            now: Instant::now(),
            popped: Vec::new(),
            ticks,
            ticked: 0,
            kills,
        }
    }

    fn choices(&self) -> Vec<Choice> {
        let mut out = Vec::new();
        for (i, a) in self.actors.iter().enumerate() {
            if a.active() && (a.at != Point::Full || a.full_since < self.ticked) {
                out.push(Choice::Step(i));
            }
            // One victim, at each of its points, keeps the search small.
            if i == 0 && self.kills > 0 && a.active() && matches!(a.at, Point::Ring(_)) {
                out.push(Choice::Kill(i));
            }
        }
        if self.ticks > 0 && self.actors.iter().any(Actor::active) {
            out.push(Choice::Tick);
        }
        out
    }

    fn apply(&mut self, choice: Choice) {
        match choice {
            Choice::Step(i) => self.actors[i].step(self.ticked),
            Choice::Kill(i) => {
                self.kills -= 1;
                self.actors[i].kill();
            }
            Choice::Tick => {
                self.ticks -= 1;
                self.tick();
            }
        }
    }

    /// The consumer waits out one stall timeout, looking at the head before and after, and
    /// pops what is ready.
    fn tick(&mut self) {
        self.ticked += 1;
        let mut c = self.ring.consumer().unwrap();
        c.check_head(self.now);
        self.now += STALL + Duration::from_millis(1);
        c.check_head(self.now);
        self.popped.extend(c.pop_owned(usize::MAX));
    }

    /// Lets every survivor finish and the consumer drain; checks what came out.
    fn finish_and_check(mut self, schedule: &[Choice]) {
        for _ in 0..64 {
            if !self.actors.iter().any(Actor::active) && self.ring.pending_slots() == 0 {
                break;
            }
            // Survivors run until the ring is full for them, then the consumer makes room.
            for a in self.actors.iter_mut() {
                while a.active() && a.at != Point::Full {
                    a.step(self.ticked);
                }
            }
            self.tick();
            for a in self.actors.iter_mut().filter(|a| a.active()) {
                a.step(self.ticked);
            }
        }
        let wedged = self.actors.iter().any(Actor::active) || self.ring.pending_slots() != 0;
        assert!(!wedged, "wedged after {schedule:?}");
        for (p, a) in self.actors.iter().enumerate() {
            let mine: Vec<_> = self
                .popped
                .iter()
                .filter(|(o, _)| o.kind == p as u32)
                .cloned()
                .collect();
            let pushed = if a.dead {
                a.pushed
            } else {
                self.records[p].len()
            };
            assert_eq!(
                mine,
                self.records[p][..pushed],
                "producer {p} after {schedule:?}"
            );
        }
        let expected: usize = self.actors.iter().map(|a| a.pushed).sum();
        assert_eq!(
            self.popped.len(),
            expected,
            "extra records after {schedule:?}"
        );
    }
}

/// Runs every schedule of a world made by `make`; returns how many ran.
fn explore(make: impl Fn() -> World) -> usize {
    // The path taken so far: (choice index, choices there), replayed and then extended.
    let mut path: Vec<(usize, usize)> = Vec::new();
    let mut runs = 0;
    loop {
        let mut world = make();
        let mut schedule = Vec::new();
        for depth in 0.. {
            let choices = world.choices();
            if choices.is_empty() {
                break;
            }
            if depth == path.len() {
                path.push((0, choices.len()));
            }
            assert_eq!(path[depth].1, choices.len(), "replay diverged");
            let choice = choices[path[depth].0];
            schedule.push(choice);
            world.apply(choice);
        }
        world.finish_and_check(&schedule);
        runs += 1;
        while let Some((i, n)) = path.pop() {
            if i + 1 < n {
                path.push((i + 1, n));
                break;
            }
        }
        if path.is_empty() {
            return runs;
        }
    }
}

/// Schedules with and without the kill (a kill is one choice among the others).
#[test]
fn every_schedule_with_a_producer_killed_mid_push_delivers_the_others() {
    let runs = explore(|| World::new(2, &[&[0], &[0, 0]], 2, 1));
    assert!(runs > 20_000, "{runs} schedules");
}

#[test]
fn every_schedule_of_multi_slot_records_delivers_each_record_once() {
    // 100 bytes take three 64-byte slots.
    let runs = explore(|| World::new(4, &[&[100], &[0, 0]], 2, 1));
    assert!(runs > 20_000, "{runs} schedules");
}
