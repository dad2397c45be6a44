use super::*;
use std::ptr;
use std::sync::atomic::AtomicBool;
use std::sync::{mpsc, Arc};
use std::thread;
use std::time::Instant;

fn rec(job_id: i64, run_lease: i64) -> Outcome {
    Outcome {
        job_id,
        run_lease,
        code: (job_id % 7) as u8,
        kind: (job_id % 1000) as u32,
        number: job_id as f64 * 0.5,
    }
}

fn payload_for(producer: i64, i: i64) -> Vec<u8> {
    let len = ((i * 37 + producer * 11) % 300) as usize;
    (0..len).map(|b| (b as i64 + i + producer) as u8).collect()
}

fn far() -> Instant {
    Instant::now() + Duration::from_secs(30)
}

#[test]
fn rejects_bad_arguments_naming_them() {
    let s = Duration::from_secs(2);
    for (cap, sb, name) in [
        (100, 128, "capacity"),
        (1, 128, "capacity"),
        (0, 128, "capacity"),
        (64, 100, "slot_bytes"),
        (64, 32, "slot_bytes"),
    ] {
        match OutcomeRing::new(cap, sb, s) {
            Err(RingError::InvalidArg(n, _)) => assert_eq!(n, name),
            other => panic!("expected InvalidArg for {cap}/{sb}, got {:?}", other.err()),
        }
    }
}

#[test]
fn single_record_roundtrip_and_len() {
    let ring = OutcomeRing::new(8, 64, Duration::from_secs(2)).unwrap();
    assert_eq!(ring.pending_slots(), 0);
    ring.push(&rec(5, 9), b"hello", None).unwrap();
    assert_eq!(ring.pending_slots(), 1);
    let got = ring.consumer().unwrap().pop_owned(10);
    assert_eq!(got, vec![(rec(5, 9), b"hello".to_vec())]);
    assert_eq!(ring.pending_slots(), 0);
    assert!(ring.consumer().unwrap().pop_owned(10).is_empty());
}

#[test]
fn multi_slot_records_wrap_around_the_ring() {
    let ring = OutcomeRing::new(8, 64, Duration::from_secs(2)).unwrap();
    // first slot holds 8 payload bytes, continuations 48 each.
    for round in 0..50i64 {
        let len = (round as usize * 13) % 200;
        let p: Vec<u8> = (0..len).map(|b| (b + round as usize) as u8).collect();
        ring.push(&rec(round, round), &p, None).unwrap();
        let got = ring.consumer().unwrap().pop_owned(1);
        assert_eq!(got, vec![(rec(round, round), p)], "round {round}");
    }
}

#[test]
fn payload_larger_than_ring_is_rejected() {
    let ring = OutcomeRing::new(4, 64, Duration::from_secs(2)).unwrap();
    let max = ring.max_payload();
    assert_eq!(max, 8 + 3 * 48);
    assert!(ring.push(&rec(1, 1), &vec![1u8; max], None).is_ok());
    assert_eq!(ring.consumer().unwrap().pop_owned(1)[0].1.len(), max);
    assert!(matches!(
        ring.push(&rec(1, 1), &vec![1u8; max + 1], None),
        Err(RingError::TooLarge { .. })
    ));
}

#[test]
fn full_ring_times_out_then_backpressure_completes() {
    let ring = Arc::new(OutcomeRing::new(4, 64, Duration::from_secs(2)).unwrap());
    for i in 0..4 {
        ring.push(&rec(i, 0), b"", None).unwrap();
    }
    assert!(!ring.try_push(&rec(9, 0), b"").unwrap());
    let t0 = Instant::now();
    let r = ring.push(
        &rec(9, 0),
        b"",
        Some(Instant::now() + Duration::from_millis(30)),
    );
    assert!(matches!(r, Err(RingError::Timeout)));
    assert!(t0.elapsed() >= Duration::from_millis(25));

    // A producer blocked on the full ring completes once the consumer frees space.
    let done = Arc::new(AtomicBool::new(false));
    let (r2, d2) = (Arc::clone(&ring), Arc::clone(&done));
    let producer = thread::spawn(move || {
        for i in 4..100 {
            r2.push(&rec(i, 0), b"x", None).unwrap();
        }
        d2.store(true, Ordering::SeqCst);
    });
    let mut seen = Vec::new();
    while seen.len() < 100 {
        if ring.consumer().unwrap().wait_ready(far()) {
            seen.extend(
                ring.consumer()
                    .unwrap()
                    .pop_owned(3)
                    .into_iter()
                    .map(|(o, _)| o.job_id),
            );
        }
    }
    producer.join().unwrap();
    assert!(done.load(Ordering::SeqCst));
    assert_eq!(seen, (0..100).collect::<Vec<_>>());
}

#[test]
fn concurrent_producers_deliver_each_record_once_in_order() {
    const PRODUCERS: i64 = 4;
    const PER: i64 = 20_000;
    let ring = Arc::new(OutcomeRing::new(256, 128, Duration::from_secs(2)).unwrap());
    let handles: Vec<_> = (0..PRODUCERS)
        .map(|p| {
            let ring = Arc::clone(&ring);
            thread::spawn(move || {
                for i in 0..PER {
                    ring.push(&rec(p, i), &payload_for(p, i), None).unwrap();
                }
            })
        })
        .collect();
    let mut next = [0i64; PRODUCERS as usize];
    let mut total = 0;
    while total < PRODUCERS * PER {
        assert!(
            ring.consumer().unwrap().wait_ready(far()),
            "timed out at {total}"
        );
        for (o, p) in ring.consumer().unwrap().pop_owned(64) {
            let (prod, i) = (o.job_id, o.run_lease);
            assert_eq!(i, next[prod as usize], "producer {prod} out of order");
            assert_eq!(o, rec(prod, i));
            assert_eq!(p, payload_for(prod, i));
            next[prod as usize] += 1;
            total += 1;
        }
    }
    for h in handles {
        h.join().unwrap();
    }
    assert!(next.iter().all(|&n| n == PER));
    assert_eq!(ring.skipped(), 0);
    assert!(ring.consumer().unwrap().pop_owned(1).is_empty());
}

#[test]
fn tiny_ring_with_multi_slot_records_under_contention() {
    // Records of up to 7 slots in a 16-slot ring: constant wrap-around and full-ring waits.
    const PRODUCERS: i64 = 3;
    const PER: i64 = 5_000;
    let ring = Arc::new(OutcomeRing::new(16, 64, Duration::from_secs(5)).unwrap());
    let handles: Vec<_> = (0..PRODUCERS)
        .map(|p| {
            let ring = Arc::clone(&ring);
            thread::spawn(move || {
                for i in 0..PER {
                    ring.push(&rec(p, i), &payload_for(p, i), None).unwrap();
                }
            })
        })
        .collect();
    let mut next = [0i64; PRODUCERS as usize];
    let mut total = 0;
    while total < PRODUCERS * PER {
        let mut c = ring.consumer().unwrap();
        assert!(c.wait_ready(far()), "timed out at {total}");
        for (o, p) in c.pop_owned(1 + total as usize % 5) {
            let (prod, i) = (o.job_id, o.run_lease);
            assert_eq!(i, next[prod as usize]);
            assert_eq!(p, payload_for(prod, i));
            next[prod as usize] += 1;
            total += 1;
        }
    }
    for h in handles {
        h.join().unwrap();
    }
    assert_eq!(ring.skipped(), 0);
}

#[test]
fn wait_ready_times_out_on_empty_ring() {
    let ring = OutcomeRing::new(8, 64, Duration::from_secs(2)).unwrap();
    let t0 = Instant::now();
    assert!(!ring
        .consumer()
        .unwrap()
        .wait_ready(Instant::now() + Duration::from_millis(20)));
    assert!(t0.elapsed() >= Duration::from_millis(15));
}

#[test]
fn dead_claimant_is_skipped_with_all_its_slots() {
    let ring = OutcomeRing::new(8, 64, Duration::from_millis(50)).unwrap();
    ring.push(&rec(1, 1), b"a", None).unwrap();
    ring.die_mid_push(100, true); // 3 slots, claimed, never published
    ring.push(&rec(2, 2), b"b", None).unwrap();
    assert_eq!(ring.consumer().unwrap().pop_owned(10).len(), 1);
    // The dead claim blocks the head: not ready before the stall timeout.
    assert!(!ring
        .consumer()
        .unwrap()
        .wait_ready(Instant::now() + Duration::from_millis(10)));
    assert!(ring.consumer().unwrap().wait_ready(far()));
    assert_eq!(ring.skipped(), 1);
    let got = ring.consumer().unwrap().pop_owned(10);
    assert_eq!(got, vec![(rec(2, 2), b"b".to_vec())]);
    for i in 0..20 {
        ring.push(&rec(i, i), &[7u8; 30], None).unwrap();
        assert_eq!(ring.consumer().unwrap().pop_owned(1)[0].0, rec(i, i));
    }
}

#[test]
fn unclaimed_dead_reservation_is_skipped_slot_by_slot() {
    let ring = OutcomeRing::new(8, 64, Duration::from_millis(30)).unwrap();
    ring.die_mid_push(40, false); // 2 slots, never claimed
    ring.push(&rec(2, 2), b"b", None).unwrap();
    assert!(ring.consumer().unwrap().wait_ready(far()));
    assert_eq!(
        ring.consumer().unwrap().pop_owned(10),
        vec![(rec(2, 2), b"b".to_vec())]
    );
    assert_eq!(ring.skipped(), 2);
}

/// A pause hook that holds the producer of `job_id` at `at`, once: it reports arriving
/// on the returned receiver and waits for a message on the returned sender.
fn hold(ring: &OutcomeRing, job_id: i64, at: Pause) -> (mpsc::Receiver<()>, mpsc::SyncSender<()>) {
    let (arrived_tx, arrived) = mpsc::sync_channel(1);
    let (resume, resume_rx) = mpsc::sync_channel::<()>(1);
    let once = Mutex::new(Some((arrived_tx, resume_rx)));
    ring.pause_at(move |point, rec| {
        if point == at && rec.job_id == job_id {
            if let Some((arrived_tx, resume_rx)) = once.lock().unwrap().take() {
                arrived_tx.send(()).unwrap();
                resume_rx.recv().unwrap();
            }
        }
    });
    (arrived, resume)
}

fn drain_all(ring: &OutcomeRing, n: usize) -> Vec<(Outcome, Vec<u8>)> {
    let mut got = Vec::new();
    while got.len() < n {
        let mut c = ring.consumer().unwrap();
        assert!(c.wait_ready(far()), "only {} of {n} records", got.len());
        got.extend(c.pop_owned(n));
    }
    got
}

#[test]
fn a_paused_claimant_keeps_its_slot_and_overwrites_nothing() {
    // A producer paused between taking its slot and writing it, for longer
    // than the stall timeout, while the ring laps.
    let ring = Arc::new(OutcomeRing::new(2, 64, Duration::from_millis(20)).unwrap());
    let (arrived, resume) = hold(&ring, 111, Pause::Claimed);
    let r = Arc::clone(&ring);
    let paused = thread::spawn(move || r.push(&rec(111, 1), b"STALE!!!", None));
    arrived.recv().unwrap();
    assert!(!ring
        .consumer()
        .unwrap()
        .wait_ready(Instant::now() + Duration::from_millis(200)));
    assert_eq!(ring.skipped(), 0, "a live claimant's slot was taken back");
    ring.push(&rec(222, 2), b"b", None).unwrap();
    // The next lap needs the paused producer's slot: this push waits for it.
    let r = Arc::clone(&ring);
    let lapping = thread::spawn(move || r.push(&rec(333, 3), b"GOOD-333", None));
    resume.send(()).unwrap();
    paused.join().unwrap().unwrap();
    let mut got = drain_all(&ring, 2);
    lapping.join().unwrap().unwrap();
    got.extend(drain_all(&ring, 1));
    assert_eq!(
        got,
        vec![
            (rec(111, 1), b"STALE!!!".to_vec()),
            (rec(222, 2), b"b".to_vec()),
            (rec(333, 3), b"GOOD-333".to_vec()),
        ]
    );
}

#[test]
fn an_unclaimed_reservation_is_taken_back_and_pushed_again() {
    let ring = Arc::new(OutcomeRing::new(4, 64, Duration::from_millis(20)).unwrap());
    let (arrived, resume) = hold(&ring, 111, Pause::Reserved);
    let r = Arc::clone(&ring);
    let paused = thread::spawn(move || r.push(&rec(111, 1), &[1u8; 100], None));
    arrived.recv().unwrap();
    ring.push(&rec(222, 2), b"b", None).unwrap();
    // The paused record's three unclaimed slots are taken back one stall each.
    assert_eq!(drain_all(&ring, 1), vec![(rec(222, 2), b"b".to_vec())]);
    assert_eq!(ring.skipped(), 3);
    resume.send(()).unwrap();
    paused.join().unwrap().unwrap();
    assert_eq!(drain_all(&ring, 1), vec![(rec(111, 1), vec![1u8; 100])]);
}

#[test]
fn a_producer_killed_while_asleep_on_a_full_ring_leaves_no_waiter_behind() {
    let ring = OutcomeRing::new(2, 64, Duration::from_secs(2)).unwrap();
    ring.push(&rec(1, 1), b"", None).unwrap();
    ring.push(&rec(2, 2), b"", None).unwrap();
    // A producer that flagged itself asleep and never came back.
    ring.word32(OFF_WAITERS).store(1, Ordering::SeqCst);
    assert_eq!(ring.consumer().unwrap().pop_owned(1).len(), 1);
    assert_eq!(ring.word32(OFF_WAITERS).load(Ordering::SeqCst), 0);
}

#[test]
fn payload_length_is_bounded_by_the_record_slots() {
    let ring = OutcomeRing::new(4, 64, Duration::from_secs(2)).unwrap();
    ring.push(&rec(1, 1), b"abc", None).unwrap();
    let p = ring.slot_ptr(0);
    // SAFETY: the record is published and the consumer is not reading it yet.
    unsafe { ptr::write(p.add(REC_PAYLOAD_LEN).cast::<u32>(), u32::MAX) };
    let got = ring.consumer().unwrap().pop_owned(1);
    assert_eq!(got[0].1.len(), 64 - FIRST_PAYLOAD);
}

#[test]
fn second_consumer_thread_is_refused() {
    let ring = Arc::new(OutcomeRing::new(8, 64, Duration::from_secs(2)).unwrap());
    let r2 = Arc::clone(&ring);
    let (holding, held) = std::sync::mpsc::channel();
    let waiter = thread::spawn(move || {
        let mut consumer = r2.consumer().unwrap();
        holding.send(()).unwrap();
        consumer.wait_ready(far())
    });
    // The waiter says when it holds the consumer (probing the lock from here could
    // take it at the moment the waiter asks, and a waiter that had already given it
    // back would leave a probe spinning forever); it sleeps until the push below.
    held.recv().unwrap();
    assert!(matches!(ring.consumer(), Err(RingError::ConsumerBusy)));
    ring.push(&rec(1, 1), b"", None).unwrap();
    assert!(waiter.join().unwrap());
}

#[test]
fn consumer_sleeps_and_is_woken_by_a_push() {
    let ring = Arc::new(OutcomeRing::new(8, 64, Duration::from_secs(2)).unwrap());
    let r2 = Arc::clone(&ring);
    let consumer = thread::spawn(move || {
        let t0 = Instant::now();
        let ok = r2.consumer().unwrap().wait_ready(far());
        (ok, t0.elapsed())
    });
    // Wait until the consumer advertises it sleeps, then push.
    while ring.word32(OFF_SLEEPING).load(Ordering::SeqCst) == 0 {
        thread::yield_now();
    }
    ring.push(&rec(1, 1), b"", None).unwrap();
    let (ok, waited) = consumer.join().unwrap();
    assert!(ok);
    assert!(waited < Duration::from_secs(5));
}
