use super::*;

const TTL_MS: u64 = 3_000;
const MS: u64 = 1_000;
const S: u64 = 1_000_000;
const BUDGET: u64 = 1_000_000;

fn op(kind: OpKind, lock: &str, client: &str, sent: u64, received: u64, result: OpResult) -> Operation {
    let mut op = Operation::single(kind, lock, client, None, sent);
    op.received_us = received;
    op.result = result;
    op
}

fn granted(token: u64) -> OpResult {
    OpResult::Granted { token, ttl_ms: TTL_MS }
}

fn refused(code: &str) -> OpResult {
    OpResult::Refused { code: code.into() }
}

fn lost() -> OpResult {
    OpResult::Unknown { reason: "timeout".into() }
}

fn acquire(client: &str, token: u64, sent: u64, received: u64) -> Operation {
    op(OpKind::AcquireTry, "l", client, sent, received, granted(token))
}

fn with_token(mut op: Operation, token: u64) -> Operation {
    op.token = Some(token);
    op
}

fn release(client: &str, token: u64, sent: u64, received: u64) -> Operation {
    with_token(op(OpKind::Release, "l", client, sent, received, OpResult::Released), token)
}

fn read(sent: u64, received: u64, holder: Option<(&str, u64)>) -> Operation {
    let result = match holder {
        Some((owner, token)) => OpResult::Held { owner: owner.into(), token },
        None => OpResult::Free,
    };
    op(OpKind::Read, "l", "reader", sent, received, result)
}

fn verdict(ops: &[Operation]) -> Verdict {
    let report = check_linearizable(ops, BUDGET);
    if report.verdict == Verdict::NotLinearizable {
        eprintln!("{:#?}", report.violations);
    }
    report.verdict
}

/// a takes the lock, reads it, releases it; b is refused while a holds it,
/// then takes it; a read overlaps b's grant.
fn two_holders() -> Vec<Operation> {
    vec![
        acquire("a", 5, 0, 10),
        read(20, 30, Some(("a", 5))),
        with_holder(op(OpKind::AcquireTry, "l", "b", 40, 50, refused("held")), "a"),
        release("a", 5, 100, 110),
        read(120, 130, None),
        acquire("b", 9, 200, 260),
        // Sent before b's grant was answered: may see either.
        read(210, 220, None),
        read(250, 270, Some(("b", 9))),
        with_token(op(OpKind::Renew, "l", "b", 300, 310, granted(9)), 9),
        release("b", 9, 400, 410),
    ]
}

fn with_holder(mut op: Operation, holder: &str) -> Operation {
    op.holder = Some(holder.into());
    op
}

// A history a correct lock table could give passes, in any recording order.
#[test]
fn a_correct_history_is_linearizable() {
    let mut ops = two_holders();
    assert_eq!(verdict(&ops), Verdict::Linearizable);
    ops.reverse();
    assert_eq!(verdict(&ops), Verdict::Linearizable);
}

// Two clients granted the lock at once, both acknowledged, is reported.
#[test]
fn a_double_grant_is_not_linearizable() {
    let ops = vec![acquire("a", 5, 0, 10), acquire("b", 9, 20, 30), release("a", 5, 40, 50)];
    assert_eq!(verdict(&ops), Verdict::NotLinearizable);
}

// A grant under a token not above the lock's last one is reported, and so
// is a read that sees a token go backwards.
#[test]
fn a_token_going_backwards_is_not_linearizable() {
    let mut ops = two_holders();
    ops[5] = acquire("b", 4, 200, 260);
    assert_eq!(verdict(&ops), Verdict::NotLinearizable);
    let mut ops = two_holders();
    ops.push(read(500, 510, Some(("a", 5))));
    assert_eq!(verdict(&ops), Verdict::NotLinearizable);
}

// A read that shows a holder after its release was acknowledged is reported.
#[test]
fn a_read_showing_a_released_holder_is_not_linearizable() {
    let mut ops = two_holders();
    ops[4] = read(120, 130, Some(("a", 5)));
    let report = check_linearizable(&ops, BUDGET);
    assert_eq!(report.verdict, Verdict::NotLinearizable);
    let window = &report.violations[0];
    assert_eq!(window.keys, vec!["lock l".to_string()]);
    assert!(window.stuck.iter().any(|s| s.contains("Read") && s.contains("held by a under 5")), "{window:#?}");
    assert!(window.linearized.iter().any(|s| s.contains("Release")), "{window:#?}");
}

/// a takes the lock at 0 and never releases it; b is granted it, its
/// acquire sent at `b_sent`.
fn expiry(b_sent: u64) -> Vec<Operation> {
    vec![acquire("a", 5, 0, 10), read(S, S + 10, Some(("a", 5))), acquire("b", 9, b_sent, b_sent + 10 * MS)]
}

// A lease may expire once its ttl has passed since its acquire was sent,
// not before: a grant to another client answered before then is reported.
#[test]
fn expiry_is_allowed_only_after_the_ttl() {
    assert_eq!(verdict(&expiry(3 * S)), Verdict::Linearizable);
    // Sent before the ttl ran out, answered after: it may have been granted then.
    assert_eq!(verdict(&expiry(3 * S - 5 * MS)), Verdict::Linearizable);
    assert_eq!(verdict(&expiry(2 * S)), Verdict::NotLinearizable);
    // A renewal restarts the ttl from its own send.
    let mut ops = expiry(4 * S);
    ops.push(with_token(op(OpKind::Renew, "l", "a", 2 * S, 2 * S + 10, granted(5)), 5));
    assert_eq!(verdict(&ops), Verdict::NotLinearizable);
    ops[2] = acquire("b", 9, 5 * S, 5 * S + 10);
    assert_eq!(verdict(&ops), Verdict::Linearizable);
}

fn record_op(kind: OpKind, client: &str, token: Option<u64>, sent: u64, received: u64, result: OpResult) -> Operation {
    let mut o = op(kind, "l", client, sent, received, result);
    o.key = Some("ledger".into());
    o.token = token;
    if kind == OpKind::GetRecord {
        o.lock = String::new();
    }
    o
}

/// a holds the lock under 5 and writes the record; its lease expires; b
/// takes the lock under 9 and writes; a, paused, writes again under 5 and
/// is refused.
fn fenced_writes() -> Vec<Operation> {
    vec![
        acquire("a", 5, 0, 10),
        record_op(OpKind::PutRecord, "a", Some(5), 20, 30, OpResult::Written { index: 6 }),
        acquire("b", 9, 4 * S, 4 * S + 10),
        record_op(OpKind::PutRecord, "b", Some(9), 4 * S + 20, 4 * S + 30, OpResult::Written { index: 10 }),
        record_op(OpKind::PutRecord, "a", Some(5), 4 * S + 40, 4 * S + 50, refused("stale_token")),
        record_op(OpKind::GetRecord, "r", None, 4 * S + 60, 4 * S + 70, OpResult::Record { token: 9, index: 10 }),
    ]
}

// A write under a stale token that the cluster took (b's write lost under
// it) is reported; the refused one is not.
#[test]
fn a_lost_write_under_a_stale_token_is_not_linearizable() {
    let mut ops = fenced_writes();
    assert_eq!(verdict(&ops), Verdict::Linearizable);
    ops[4].result = OpResult::Written { index: 11 };
    assert_eq!(verdict(&ops), Verdict::NotLinearizable);
    // The read after it then shows a's write: b's is lost.
    let mut ops = fenced_writes();
    ops[5].result = OpResult::Record { token: 5, index: 6 };
    assert_eq!(verdict(&ops), Verdict::NotLinearizable);
}

// A gate admits only current tokens, never one below its highest.
#[test]
fn a_gate_admitting_an_old_token_is_not_linearizable() {
    let gate = |client: &str, token: u64, sent: u64, result: OpResult| {
        let mut o = record_op(OpKind::Gate, client, Some(token), sent, sent + 10, result);
        o.key = Some("printer".into());
        o
    };
    let ops = vec![
        acquire("a", 5, 0, 10),
        gate("a", 5, 20, OpResult::Admitted),
        acquire("b", 9, 4 * S, 4 * S + 10),
        gate("b", 9, 4 * S + 20, OpResult::Admitted),
        gate("a", 5, 4 * S + 40, refused("stale_token")),
    ];
    assert_eq!(verdict(&ops), Verdict::Linearizable);
    let mut bad = ops.clone();
    bad[4].result = OpResult::Admitted;
    assert_eq!(verdict(&bad), Verdict::NotLinearizable);
}

fn session_op(kind: OpKind, client: &str, session: u64, sent: u64, received: u64, result: OpResult) -> Operation {
    let mut o = op(kind, "", client, sent, received, result);
    o.session = Some(session);
    o
}

fn alive() -> OpResult {
    OpResult::SessionAlive { ttl_ms: TTL_MS }
}

/// Session 100 of s holds two locks, one by a multi-acquire with another
/// lock; keepalives at 1 s and 2 s; then b takes l at `b_sent`.
fn sessions(b_sent: u64) -> Vec<Operation> {
    let mut multi = op(OpKind::MultiAcquireTry, "", "s", 30, 40, granted(102));
    multi.names = vec!["l".into(), "m".into()];
    multi.session = Some(100);
    vec![
        session_op(OpKind::SessionCreate, "s", 100, 0, 10, alive()),
        multi,
        session_op(OpKind::KeepAlive, "s", 100, S, S + 10, alive()),
        session_op(OpKind::KeepAlive, "s", 100, 2 * S, 2 * S + 10, alive()),
        acquire("b", 150, b_sent, b_sent + 10),
        op(OpKind::Read, "m", "r", b_sent + 20, b_sent + 30, OpResult::Free),
    ]
}

// Locks under a session live as long as it: its keepalives carry them, its
// expiry frees all of them at once, and a keepalive refused while it lives
// is reported.
#[test]
fn sessions_carry_their_locks() {
    assert_eq!(verdict(&sessions(5 * S)), Verdict::Linearizable);
    assert_eq!(verdict(&sessions(4 * S)), Verdict::NotLinearizable);
    let mut ops = sessions(6 * S);
    ops.push(session_op(OpKind::KeepAlive, "s", 100, 3 * S, 3 * S + 10, refused("session_not_found")));
    assert_eq!(verdict(&ops), Verdict::NotLinearizable);
    // Deleted at 2.5 s: both locks free at once.
    let mut ops = sessions(26 * S / 10);
    ops.push(session_op(OpKind::SessionDelete, "s", 100, 25 * S / 10, 25 * S / 10 + 10, OpResult::Released));
    assert_eq!(verdict(&ops), Verdict::Linearizable);
    let report = check_linearizable(&ops, BUDGET);
    assert_eq!((report.components, report.largest_component), (1, 7));
}

// A multi-lock grant takes all its names at once: a read of one of them
// between grant and release that shows it free is reported.
#[test]
fn a_multi_lock_grant_is_atomic() {
    let mut multi = op(OpKind::MultiAcquireTry, "", "m", 0, 10, granted(7));
    multi.names = vec!["l".into(), "k".into()];
    let mut release = with_token(op(OpKind::MultiRelease, "", "m", 100, 110, OpResult::Released), 7);
    release.names = multi.names.clone();
    let mut ops =
        vec![multi, release, op(OpKind::Read, "k", "r", 20, 30, OpResult::Held { owner: "m".into(), token: 7 })];
    assert_eq!(verdict(&ops), Verdict::Linearizable);
    ops[2].result = OpResult::Free;
    assert_eq!(verdict(&ops), Verdict::NotLinearizable);
}

// An acquire whose answer was lost may have been granted: a later read
// that shows its owner holding the lock is fine, and so is one that shows
// the lock free; a later grant to another client must wait for its expiry.
#[test]
fn a_lost_answer_may_or_may_not_have_taken_effect() {
    let lost_acquire = op(OpKind::AcquireTry, "l", "a", 0, 5 * S, lost());
    let ops = vec![lost_acquire.clone(), read(10 * MS, 20 * MS, Some(("a", 5))), read(4 * S, 4 * S + 10, None)];
    assert_eq!(verdict(&ops), Verdict::Linearizable);
    let ops = vec![lost_acquire.clone(), read(10 * MS, 20 * MS, None)];
    assert_eq!(verdict(&ops), Verdict::Linearizable);
    let shown = vec![lost_acquire.clone(), read(10 * MS, 20 * MS, Some(("a", 5))), acquire("b", 9, S, S + 10)];
    assert_eq!(verdict(&shown), Verdict::NotLinearizable);
    // A lost release may have freed the lock.
    let ops = vec![
        acquire("a", 5, 0, 10),
        with_token(op(OpKind::Release, "l", "a", 20, 5 * S, lost()), 5),
        acquire("b", 9, 30 * MS, 40 * MS),
    ];
    assert_eq!(verdict(&ops), Verdict::Linearizable);
}

// A search that runs out of budget says so, rather than guessing.
#[test]
fn a_search_out_of_budget_is_unknown() {
    let ops = two_holders();
    let report = check_linearizable(&ops, 2);
    assert_eq!(report.verdict, Verdict::Unknown);
    assert_eq!(report.out_of_budget.len(), 1);
}

/// A lock service that keeps its promises, simulated: `clients` clients
/// run cycles on `names` lock names for `seconds`, each cycle a single or
/// multi-lock try-acquire, a read, sometimes a renew, a release (or, one in
/// twenty, an abandoned lease left to expire), sometimes a read after it, with 1–6 ms of latency on
/// either side of each operation's point, one answer in a hundred lost
/// (applied or not), and think time between operations.
fn simulated_history(clients: usize, names: usize, seconds: u64, seed: u64) -> Vec<Operation> {
    use std::cmp::Reverse;
    use std::collections::BinaryHeap;

    #[derive(Clone)]
    struct Lease {
        owner: String,
        token: u64,
        expires_us: u64,
    }
    struct Client {
        owner: String,
        held: Option<(Vec<String>, u64)>,
        step: u8,
    }
    let mut rng = fastrand::Rng::with_seed(seed);
    let mut table: HashMap<String, Lease> = HashMap::new();
    let mut index = 0u64;
    let mut history = Vec::new();
    let mut clients: Vec<Client> =
        (0..clients).map(|i| Client { owner: format!("c{i}-0"), held: None, step: 0 }).collect();
    // (time the operation applies, client): one operation in flight per client.
    let mut queue: BinaryHeap<Reverse<(u64, usize)>> = BinaryHeap::new();
    let mut in_flight: Vec<Option<Operation>> = vec![None; clients.len()];
    let end_us = seconds * S;
    let start = |queue: &mut BinaryHeap<_>,
                 in_flight: &mut [Option<Operation>],
                 rng: &mut fastrand::Rng,
                 client: usize,
                 op: Operation| {
        queue.push(Reverse((op.sent_us + rng.u64(MS..6 * MS), client)));
        in_flight[client] = Some(op);
    };
    for (i, _) in clients.iter().enumerate() {
        let lock = format!("n{}", rng.usize(..names));
        let first = Operation::single(OpKind::AcquireTry, &lock, &format!("c{i}-0"), None, rng.u64(..S));
        start(&mut queue, &mut in_flight, &mut rng, i, first);
    }
    while let Some(Reverse((at, i))) = queue.pop() {
        let mut op = in_flight[i].take().expect("a client's operation in flight");
        // The service: leases past their deadline (with a tick of slack) are gone.
        table.retain(|_, l| l.expires_us > at);
        // One answer in a hundred is lost: applied, or half the time never.
        let lost_answer = rng.u8(..100) == 0;
        let applied = !lost_answer || rng.bool();
        index += 1;
        let client = &mut clients[i];
        let result = match op.kind {
            _ if !applied => lost(),
            OpKind::AcquireTry | OpKind::MultiAcquireTry => {
                let locks: Vec<String> = op.locks().map(str::to_owned).collect();
                match locks.iter().find_map(|l| table.get(l)) {
                    Some(holder) => {
                        op.holder = (op.kind == OpKind::AcquireTry).then(|| holder.owner.clone());
                        refused("held")
                    }
                    None => {
                        for l in &locks {
                            let lease =
                                Lease { owner: op.client.clone(), token: index, expires_us: at + 3 * S + 100 * MS };
                            table.insert(l.clone(), lease);
                        }
                        client.held = Some((locks, index));
                        granted(index)
                    }
                }
            }
            OpKind::Read => match table.get(&op.lock) {
                Some(l) => OpResult::Held { owner: l.owner.clone(), token: l.token },
                None => OpResult::Free,
            },
            OpKind::Renew => match table.get_mut(&op.lock) {
                Some(l) if Some(l.token) == op.token => {
                    l.expires_us = at + 3 * S + 100 * MS;
                    granted(l.token)
                }
                Some(_) => refused("stale_token"),
                None => refused("not_held"),
            },
            _ => {
                let locks: Vec<String> = op.locks().map(str::to_owned).collect();
                if locks.iter().all(|l| table.get(l).is_some_and(|h| Some(h.token) == op.token)) {
                    for l in &locks {
                        table.remove(l);
                    }
                    OpResult::Released
                } else {
                    refused("stale_token")
                }
            }
        };
        let answered = at + rng.u64(MS..6 * MS);
        if lost_answer {
            op.result = lost();
            op.received_us = answered + 2 * S;
        } else {
            op.result = result;
            op.received_us = answered;
        }
        let outcome = op.result.clone();
        history.push(op.clone());
        // The client's next operation.
        let next_sent = op.received_us + rng.u64(..800 * MS);
        if next_sent > end_us {
            continue;
        }
        let c = &mut clients[i];
        let next_cycle = |c: &mut Client, rng: &mut fastrand::Rng| {
            c.step = 0;
            c.held = None;
            let cycle: u64 = c.owner.rsplit('-').next().and_then(|n| n.parse().ok()).unwrap_or(0) + 1;
            c.owner = format!("c{i}-{cycle}");
            if rng.u8(..10) < 3 {
                let a = rng.usize(..names);
                let b = (a + 1 + rng.usize(..names - 1)) % names;
                let mut multi = Operation::single(OpKind::MultiAcquireTry, "", &c.owner, None, next_sent);
                multi.names = vec![format!("n{a}"), format!("n{b}")];
                multi
            } else {
                Operation::single(OpKind::AcquireTry, &format!("n{}", rng.usize(..names)), &c.owner, None, next_sent)
            }
        };
        let granted_now = matches!(outcome, OpResult::Granted { .. });
        let next = match (c.step, &c.held) {
            (0, Some((locks, _))) if granted_now => {
                c.step = 1;
                Operation::single(OpKind::Read, &locks[rng.usize(..locks.len())], &c.owner, None, next_sent)
            }
            (1, Some((locks, token))) if locks.len() == 1 && rng.u8(..4) == 0 => {
                c.step = 2;
                Operation::single(OpKind::Renew, &locks[0], &c.owner, Some(*token), next_sent)
            }
            (1 | 2, Some(_)) if rng.u8(..20) == 0 => next_cycle(c, &mut rng),
            (1 | 2, Some((locks, token))) => {
                c.step = 3;
                let mut release = Operation::single(OpKind::Release, &locks[0], &c.owner, Some(*token), next_sent);
                if locks.len() > 1 {
                    release.kind = OpKind::MultiRelease;
                    release.lock = String::new();
                    release.names = locks.clone();
                }
                release
            }
            (3, Some((locks, _))) if rng.u8(..3) == 0 => {
                c.step = 4;
                Operation::single(OpKind::Read, &locks[0], &c.owner, None, next_sent)
            }
            _ => next_cycle(c, &mut rng),
        };
        start(&mut queue, &mut in_flight, &mut rng, i, next);
    }
    history
}

// A simulated correct history of many clients is linearizable, and one
// answer changed in it makes it not: the checker has no blind spot for
// each kind of mutation.
#[test]
fn simulated_histories_pass_and_their_mutations_fail() {
    let ops = simulated_history(8, 6, 30, 1);
    let report = check_linearizable(&ops, BUDGET);
    assert_eq!(report.verdict, Verdict::Linearizable, "{:#?}", report.violations);
    assert!(ops.len() > 500, "{} operations", ops.len());
    let is = |op: &Operation, kind: OpKind, f: fn(&OpResult) -> bool| op.kind == kind && f(&op.result);
    let mutate = |pick: &dyn Fn(&Operation) -> bool, change: &dyn Fn(&mut Operation)| {
        let i = ops.iter().rposition(pick).expect("an operation to mutate");
        let mut mutated = ops.clone();
        change(&mut mutated[i]);
        let report = check_linearizable(&mutated, BUDGET);
        assert_eq!(report.verdict, Verdict::NotLinearizable, "mutated {}", describe(&mutated[i]));
    };
    // A read of a held lock shows it free.
    mutate(&|op| is(op, OpKind::Read, |r| matches!(r, OpResult::Held { .. })), &|op| op.result = OpResult::Free);
    // A grant's token goes below one granted before.
    mutate(&|op| op.kind == OpKind::AcquireTry && op.is_grant(), &|op| op.result = granted(1));
    // A release that was acknowledged is refused.
    mutate(&|op| is(op, OpKind::Release, |r| *r == OpResult::Released), &|op| op.result = refused("stale_token"));
    // A read of a free lock shows a holder.
    mutate(&|op| is(op, OpKind::Read, |r| *r == OpResult::Free), &|op| {
        op.result = OpResult::Held { owner: "nobody".into(), token: u64::MAX };
    });
}

// The check of a history as long as a 20-minute chaos run's stays bounded:
// about 70 000 operations over 30 names, checked within the default
// budget. The time it takes is printed (`--nocapture`), not asserted.
#[test]
fn a_twenty_minute_history_is_checked_within_budget() {
    let ops = simulated_history(24, 30, 1200, 20);
    let began = std::time::Instant::now();
    let report = check_linearizable(&ops, DEFAULT_BUDGET);
    eprintln!(
        "20-minute synthetic history: {} operations, {}; checked in {:.2} s",
        ops.len(),
        report.summary(),
        began.elapsed().as_secs_f64()
    );
    assert_eq!(report.verdict, Verdict::Linearizable, "{:#?}", report.violations);
}
