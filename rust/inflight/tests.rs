use super::*;
use std::sync::Arc;
use std::thread;

#[test]
fn rejects_bad_arguments() {
    assert!(matches!(
        InFlight::new(&[], 4),
        Err(InFlightError::InvalidArg("capacities", _))
    ));
    assert!(matches!(
        InFlight::new(&[1, -1], 4),
        Err(InFlightError::InvalidArg("capacities", _))
    ));
    assert!(matches!(
        InFlight::new(&[1], 0),
        Err(InFlightError::InvalidArg("slots", _))
    ));
    let t = InFlight::new(&[1, 2], 4).unwrap();
    assert!(matches!(
        t.queue_index(2),
        Err(InFlightError::Index("queue", 2, 2))
    ));
    assert!(t.queue_index(-1).is_err());
    assert!(t.slot_index(4).is_err());
    assert_eq!(t.slot_index(3).unwrap(), 3);
}

#[test]
fn reserve_release_and_capacity() {
    let t = InFlight::new(&[3, 0], 8).unwrap();
    assert_eq!(t.reserve(0, 2), 2);
    assert_eq!(t.reserve(0, 5), 1);
    assert_eq!(t.reserve(0, 1), 0);
    assert_eq!(t.reserve(1, 1), 0);
    assert_eq!((t.in_flight(0), t.free(0), t.capacity(0)), (3, 0, 3));
    t.release(0, 2).unwrap();
    assert_eq!(t.free(0), 2);
    assert!(matches!(
        t.release(0, 5),
        Err(InFlightError::OverRelease { .. })
    ));
    t.set_capacity(0, 0).unwrap();
    assert_eq!(t.free(0), 0);
    assert_eq!(t.reserve(0, 1), 0);
    t.set_capacity(0, 10).unwrap();
    assert_eq!(t.reserve(0, 100), 9);
    assert_eq!(t.total_in_flight(), 10);
    let two = InFlight::new(&[4, 4], 8).unwrap();
    two.reserve(0, 1);
    two.reserve(1, 3);
    assert_eq!(two.total_in_flight(), 4);
    two.release(1, 3).unwrap();
    two.release(0, 1).unwrap();
    assert_eq!(two.total_in_flight(), 0);
}

#[test]
fn concurrent_reserve_never_exceeds_capacity() {
    let t = Arc::new(InFlight::new(&[10], 8).unwrap());
    let handles: Vec<_> = (0..4)
        .map(|_| {
            let t = Arc::clone(&t);
            thread::spawn(move || {
                for i in 0..50_000 {
                    let got = t.reserve(0, 1 + i % 3);
                    let now = t.in_flight(0);
                    assert!(now <= 10, "in flight {now} over capacity");
                    if got > 0 {
                        t.release(0, got).unwrap();
                    }
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    assert_eq!(t.in_flight(0), 0);
}

#[test]
fn slots_lifecycle_cancel_and_release_worker() {
    let t = InFlight::new(&[4, 4], 4).unwrap();
    assert_eq!(t.reserve(0, 3), 3);
    assert_eq!(t.reserve(1, 1), 1);
    let a = t.acquire_slot(100, 1, 0, 7).unwrap();
    let b = t.acquire_slot(101, 1, 0, 7).unwrap();
    let c = t.acquire_slot(102, 5, 1, 8).unwrap();
    let d = t.acquire_slot(103, 1, 0, 8).unwrap();
    assert!(matches!(
        t.acquire_slot(104, 1, 0, 8),
        Err(InFlightError::Full)
    ));
    assert_eq!(
        t.slot_info(c),
        Some(SlotInfo {
            job_id: 102,
            run_lease: 5,
            queue: 1,
            worker: 8,
            cancelled: false,
            started: false
        })
    );
    assert_eq!(t.cancel(102, Some(4)), 0);
    assert_eq!(t.cancel(102, Some(5)), 1);
    assert!(t.is_cancelled(c) && !t.is_cancelled(a));
    assert_eq!(t.cancel(100, None), 1);
    assert!(t.is_cancelled(a));
    assert_eq!(t.cancel_worker(8), 2);
    assert!(t.is_cancelled(d));
    assert!(!t.is_cancelled(b));

    let mut running: Vec<_> = t.occupied().iter().map(|i| i.job_id).collect();
    running.sort();
    assert_eq!(running, vec![100, 101, 102, 103]);

    assert!(t.release_slot(d));
    assert!(!t.release_slot(d));
    assert_eq!(t.in_flight(0), 2);
    let mut gone: Vec<_> = t
        .release_worker(7)
        .iter()
        .map(|i| (i.job_id, i.run_lease, i.queue))
        .collect();
    gone.sort();
    assert_eq!(gone, vec![(100, 1, 0), (101, 1, 0)]);
    assert_eq!(t.in_flight(0), 0);
    assert_eq!(t.in_flight(1), 1);
    assert!(t.slot_info(a).is_none());
    // Reused slot starts uncancelled.
    let e = t.acquire_slot(200, 1, 0, 9).unwrap();
    assert!(!t.is_cancelled(e));
    assert_eq!(t.occupied().len(), 2);
}

#[test]
fn dead_claiming_slot_is_reclaimed() {
    let t = InFlight::new(&[4], 2).unwrap();
    // Simulate a worker killed between its claim CAS and publishing the fields.
    t.state(1).store(with(1, 3, CLAIMING), Ordering::Relaxed);
    assert!(t.release_worker(3).is_empty());
    assert_eq!(phase(t.state(1).load(Ordering::Relaxed)), FREE);
}

/// A worker (7) holding one job of queue 0, and the slot it runs in.
fn one_running() -> (InFlight, usize) {
    let t = InFlight::new(&[2], 4).unwrap();
    assert_eq!(t.reserve(0, 1), 1);
    let slot = t.acquire_slot(100, 1, 0, 7).unwrap();
    (t, slot)
}

#[test]
fn worker_killed_before_giving_its_unit_back_leaks_nothing() {
    let (t, slot) = one_running();
    t.begin_release(slot, |_| true).unwrap(); // killed right after
    assert!(
        t.occupied().is_empty(),
        "its outcome is pushed: not reported lost"
    );
    assert!(t.release_worker(7).is_empty());
    assert_eq!(t.in_flight(0), 0);
    assert_eq!(phase(t.state(slot).load(Ordering::Relaxed)), FREE);
}

#[test]
fn worker_killed_after_giving_its_unit_back_is_not_counted_twice() {
    let (t, slot) = one_running();
    assert_eq!(t.reserve(0, 1), 1); // a second unit, claimed for the worker meanwhile
    let (releasing, info) = t.begin_release(slot, |_| true).unwrap();
    t.return_unit(info.queue as usize, release_tag(slot, gen_of(releasing)));
    // killed before freeing the slot
    assert!(t.release_worker(7).is_empty());
    assert_eq!(t.in_flight(0), 1);
    assert_eq!(phase(t.state(slot).load(Ordering::Relaxed)), FREE);
}

#[test]
fn the_release_tag_survives_reservations_and_marks_each_generation() {
    let (t, slot) = one_running();
    assert!(t.release_slot(slot));
    let gen = gen_of(t.state(slot).load(Ordering::Relaxed));
    assert!(t.unit_returned(0, release_tag(slot, gen)));
    assert_eq!(t.reserve(0, 2), 2);
    t.release(0, 1).unwrap();
    assert!(t.unit_returned(0, release_tag(slot, gen)));
    assert!(!t.unit_returned(0, release_tag(slot, gen + 1)));
    assert_eq!(t.in_flight(0), 1);
}

#[test]
fn capacity_above_the_count_width_is_refused() {
    assert!(InFlight::new(&[MAX_CAPACITY + 1], 4).is_err());
    let t = InFlight::new(&[MAX_CAPACITY], 4).unwrap();
    assert_eq!(t.reserve(0, i64::MAX), MAX_CAPACITY);
    assert!(t.set_capacity(0, MAX_CAPACITY + 1).is_err());
}

#[test]
fn concurrent_slot_churn_keeps_snapshots_consistent() {
    let t = Arc::new(InFlight::new(&[1_000_000], 16).unwrap());
    let workers: Vec<_> = (0..3u32)
        .map(|w| {
            let t = Arc::clone(&t);
            thread::spawn(move || {
                for i in 0..20_000i64 {
                    let id = (w as i64) * 1_000_000 + i;
                    assert_eq!(t.reserve(0, 1), 1);
                    let s = t.acquire_slot(id, id * 2, 0, w).unwrap();
                    let info = t.slot_info(s).unwrap();
                    assert_eq!((info.job_id, info.worker), (id, w));
                    assert!(t.release_slot(s));
                }
            })
        })
        .collect();
    let reader = {
        let t = Arc::clone(&t);
        thread::spawn(move || {
            for _ in 0..2_000 {
                for info in t.occupied() {
                    // Fields of one snapshot always belong together.
                    assert_eq!(info.run_lease, info.job_id * 2);
                    assert_eq!(info.job_id / 1_000_000, info.worker as i64);
                }
                t.cancel_worker(1);
            }
        })
    };
    for h in workers {
        h.join().unwrap();
    }
    reader.join().unwrap();
    assert_eq!(t.in_flight(0), 0);
    assert!(t.occupied().is_empty());
}

#[test]
fn a_dead_workers_attempts_say_whether_they_started() {
    let t = InFlight::new(&[4], 8).unwrap();
    assert_eq!(t.reserve(0, 3), 3);
    let running = t.acquire_slot(1, 1, 0, 2).unwrap();
    let queued = t.acquire_slot(2, 1, 0, 2).unwrap();
    let cancelled = t.acquire_slot(3, 1, 0, 2).unwrap();
    t.mark_started(running);
    assert_eq!(t.cancel(3, None), 1);
    t.mark_started(cancelled); // the cancel bit is kept
    t.mark_started(cancelled); // and marking twice changes nothing
    assert!(t.is_cancelled(cancelled));
    let mut freed: Vec<(i64, bool, bool)> = t
        .release_worker(2)
        .into_iter()
        .map(|i| (i.job_id, i.started, i.cancelled))
        .collect();
    freed.sort();
    assert_eq!(
        freed,
        vec![(1, true, false), (2, false, false), (3, true, true)]
    );
    assert_eq!(t.in_flight(0), 0);
    t.mark_started(queued); // a freed slot stays free
    assert_eq!(t.slot_info(queued), None);
}
