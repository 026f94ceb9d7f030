//! The `LeaseStore` port: fenced leases, and fleet rows apart from them.

use tally_core::ports::{
    Ask, CounterStore, Fence, LeaseStore, Member, PortError, Renewal, ShardInfo, ShardTally,
};

/// Leases: rows created once, taken by epoch, renewed, stolen, fenced, released, finished.
/// The fleet rows: a heartbeat makes a worker a live member until it expires, a stop takes it
/// out at once, and no listing of the application's leases shows them.
pub async fn fleet_rows_are_apart_from_leases(store: &dyn LeaseStore, name: &str) {
    let app = format!("fleet-{name}");
    store
        .ensure_leases(
            &app,
            &[ShardInfo {
                shard_id: "shard-a".into(),
                parents: vec![],
                closed: false,
            }],
        )
        .await
        .unwrap();
    let ids = |m: Vec<Member>| m.into_iter().map(|m| m.worker).collect::<Vec<_>>();
    store.heartbeat(&app, "w1", 5_000, &[]).await.unwrap();
    store.heartbeat(&app, "w2", 2_000, &[]).await.unwrap();
    assert_eq!(
        ids(store.fleet(&app, 1_000).await.unwrap()),
        vec!["w1", "w2"]
    );
    assert_eq!(
        ids(store.fleet(&app, 2_000).await.unwrap()),
        vec!["w1"],
        "w2's row expired"
    );
    // A heartbeat extends the row, and carries what the worker asks for until the next.
    let ask = an_ask();
    store
        .heartbeat(&app, "w2", 9_000, std::slice::from_ref(&ask))
        .await
        .unwrap();
    let fleet = store.fleet(&app, 6_000).await.unwrap();
    assert_eq!(
        fleet,
        vec![Member {
            worker: "w2".into(),
            asks: vec![ask]
        }]
    );
    store.heartbeat(&app, "w2", 9_000, &[]).await.unwrap();
    assert!(
        store.fleet(&app, 6_000).await.unwrap()[0].asks.is_empty(),
        "asks cleared"
    );
    store.leave_fleet(&app, "w2").await.unwrap();
    assert!(ids(store.fleet(&app, 0).await.unwrap()) == vec!["w1"]);
    let states = store.list_states(&app).await.unwrap();
    assert_eq!(states.len(), 1, "one lease row, no fleet row: {states:?}");
    assert!(store
        .fleet(&format!("other-{name}"), 0)
        .await
        .unwrap()
        .is_empty());
}

/// The orderly handoff: a worker asks the holder of a lease for it; the holder reads the request
/// with its next renewal and hands the lease over in one fenced write (owner, epoch, request);
/// a stale ask is refused; a take or a release clears a request.
pub async fn leases_are_handed_over_on_request(store: &dyn LeaseStore, name: &str) {
    let app = format!("handoff-{name}");
    let shard = ShardInfo {
        shard_id: "shard-a".into(),
        parents: vec![],
        closed: false,
    };
    store.ensure_leases(&app, &[shard]).await.unwrap();
    let far = i64::MAX / 2;
    let a = store
        .take_lease(&app, "shard-a", 0, "a", far)
        .await
        .unwrap()
        .expect("free");
    assert_eq!(
        store.renew_lease(&a, far, None, None).await.unwrap(),
        None,
        "no one asked yet"
    );
    let stale = Fence {
        epoch: a.epoch - 1,
        ..a.clone()
    };
    assert!(
        !store.ask_handoff(&stale, "b").await.unwrap(),
        "an ask at an old epoch is refused"
    );
    let not_holder = Fence {
        owner: "c".into(),
        ..a.clone()
    };
    assert!(
        !store.ask_handoff(&not_holder, "b").await.unwrap(),
        "an ask naming another holder is refused"
    );
    assert!(store.ask_handoff(&a, "b").await.unwrap());
    assert_eq!(
        store
            .renew_lease(&a, far, None, None)
            .await
            .unwrap()
            .as_deref(),
        Some("b"),
        "the holder reads the request with a renewal, its lease still valid"
    );
    store.hand_over(&a, "b", far).await.unwrap();
    let l = &store.list_leases(&app).await.unwrap()[0];
    assert_eq!(
        (l.owner.as_deref(), l.epoch),
        (Some("b"), a.epoch + 1),
        "handed over, epoch bumped"
    );
    assert!(
        matches!(
            store.renew_lease(&a, far, None, None).await,
            Err(PortError::Fenced { .. })
        ),
        "the old holder is fenced"
    );
    assert!(matches!(
        store.hand_over(&a, "c", far).await,
        Err(PortError::Fenced { .. })
    ));
    // The new holder takes the lease in its own name again (a new epoch): no request left.
    let b = store
        .take_lease(&app, "shard-a", l.epoch, "b", far)
        .await
        .unwrap()
        .expect("ours");
    assert_eq!(
        store.renew_lease(&b, far, None, None).await.unwrap(),
        None,
        "the request went with the handover"
    );
    // A release clears a request too.
    assert!(store.ask_handoff(&b, "c").await.unwrap());
    store.release_lease(&b).await.unwrap();
    let c = store
        .take_lease(&app, "shard-a", b.epoch, "c", far)
        .await
        .unwrap()
        .expect("released");
    assert_eq!(store.renew_lease(&c, far, None, None).await.unwrap(), None);
    // And a take: a request, then the lease taken outright by the asker.
    assert!(store.ask_handoff(&c, "d").await.unwrap());
    let d = store
        .take_lease(&app, "shard-a", c.epoch, "d", far)
        .await
        .unwrap()
        .expect("taken");
    assert_eq!(store.renew_lease(&d, far, None, None).await.unwrap(), None);
}

/// A lease taken at a new epoch fences its earlier holder: renewals, releases and fenced writes
/// at the old epoch fail.
pub async fn leases_are_fenced(store: &dyn LeaseStore, name: &str) {
    let app = format!("app-{name}");
    let shards = vec![
        ShardInfo {
            shard_id: "shard-a".into(),
            parents: vec![],
            closed: false,
        },
        ShardInfo {
            shard_id: "shard-b".into(),
            parents: vec!["shard-a".into()],
            closed: false,
        },
    ];
    store.ensure_leases(&app, &shards).await.unwrap();
    store.ensure_leases(&app, &shards).await.unwrap();
    let ls = store.list_leases(&app).await.unwrap();
    assert_eq!(ls.len(), 2);
    assert_eq!(ls[1].parents, vec!["shard-a".to_string()]);
    assert!(ls
        .iter()
        .all(|l| l.owner.is_none() && l.epoch == 0 && l.checkpoint.is_none() && !l.finished));

    let f1 = store
        .take_lease(&app, "shard-a", 0, "w1", i64::MAX / 2)
        .await
        .unwrap()
        .expect("free lease taken");
    assert_eq!(f1.epoch, 1);
    assert!(
        store
            .take_lease(&app, "shard-a", 0, "w2", i64::MAX / 2)
            .await
            .unwrap()
            .is_none(),
        "a stale epoch loses"
    );
    let read = tally_core::ports::ReadProgress {
        at_ms: 1_000,
        behind_ms: 0,
    };
    store
        .renew_lease(&f1, i64::MAX / 2, Some(read), Some("10.0.1.7:9100"))
        .await
        .unwrap();
    let states = store.list_states(&app).await.unwrap();
    assert_eq!(states.len(), 2, "one listing, every row's state");
    assert_eq!(states[0].lease.shard_id, "shard-a");
    assert_eq!(
        states[0].progress,
        Some(read),
        "the renewal's report is kept"
    );
    assert_eq!(states[1].progress, None);
    assert_eq!(states[0].holder_addr.as_deref(), Some("10.0.1.7:9100"));
    assert_eq!(states[1].holder_addr, None);
    // A renewal without a report keeps the last one.
    store
        .renew_lease(&f1, i64::MAX / 2, None, None)
        .await
        .unwrap();
    let st = store.shard_state(&app, "shard-a").await.unwrap();
    assert_eq!(st.progress, Some(read));
    assert_eq!(st.holder_addr.as_deref(), Some("10.0.1.7:9100"));
    let f2 = store
        .take_lease(&app, "shard-a", 1, "w2", i64::MAX / 2)
        .await
        .unwrap()
        .expect("steal by epoch");
    assert_eq!(
        store
            .shard_state(&app, "shard-a")
            .await
            .unwrap()
            .holder_addr,
        None,
        "a new holder's address is its own to report: the old one's is cleared"
    );
    assert!(
        matches!(
            store.renew_lease(&f1, 1, None, None).await,
            Err(PortError::Fenced { .. })
        ),
        "the old holder is fenced"
    );
    assert!(matches!(
        store.mark_finished(&f1).await,
        Err(PortError::Fenced { .. })
    ));
    store.release_lease(&f1).await.unwrap(); // a no-op for a lease we no longer hold
    let st = store.shard_state(&app, "shard-a").await.unwrap();
    assert_eq!(st.lease.owner.as_deref(), Some("w2"));
    store.release_lease(&f2).await.unwrap();
    let st = store.shard_state(&app, "shard-a").await.unwrap();
    assert_eq!((st.lease.owner.clone(), st.lease.epoch), (None, 2));
    let f3 = store
        .take_lease(&app, "shard-a", 2, "w3", i64::MAX / 2)
        .await
        .unwrap()
        .unwrap();
    store.mark_finished(&f3).await.unwrap();
    assert!(
        store
            .shard_state(&app, "shard-a")
            .await
            .unwrap()
            .lease
            .finished
    );
    // A worker lists the rows (shard-a finished, its row still there), another cleans shard-a
    // up, then the first makes sure the shards it listed have rows, from its stale listing: the
    // cleaned-up row does not come back (it would be read again from the oldest record, with no
    // checkpoint and no duplicate filter, and its children would wait for it for ever).
    let stale_view = store.list_leases(&app).await.unwrap();
    assert!(stale_view
        .iter()
        .any(|l| l.shard_id == "shard-a" && l.finished));
    store.delete_lease(&app, "shard-a").await.unwrap();
    let stale_shards: Vec<ShardInfo> = stale_view
        .iter()
        .map(|l| ShardInfo {
            shard_id: l.shard_id.clone(),
            parents: l.parents.clone(),
            closed: l.shard_id == "shard-a",
        })
        .collect();
    store.ensure_leases(&app, &stale_shards).await.unwrap();
    let ls = store.list_leases(&app).await.unwrap();
    assert_eq!(
        ls.iter().map(|l| l.shard_id.as_str()).collect::<Vec<_>>(),
        ["shard-b"],
        "the cleaned-up row stays gone, and no tombstone is listed as a lease"
    );
    assert!(matches!(
        store.shard_state(&app, "shard-a").await,
        Err(PortError::NotFound { .. })
    ));
    // A shard never seen before still gets its row.
    let new = ShardInfo {
        shard_id: "shard-c".into(),
        parents: vec!["shard-b".into()],
        closed: false,
    };
    store.ensure_leases(&app, &[new]).await.unwrap();
    assert_eq!(store.list_leases(&app).await.unwrap().len(), 2);
}

/// Which lease row [`a_corrupt_lease_row_is_named`] corrupts, and how: the adapter's own test
/// writes `value` (a string where the field holds something else) into `field` of the row of
/// `app`/`shard`, behind the store's back.
pub struct CorruptLease<'a> {
    /// The application.
    pub app: &'a str,
    /// The shard.
    pub shard: &'a str,
    /// The field corrupted.
    pub field: &'a str,
}

/// Lease store: a lease row whose `parents` (or another field) is not what tally writes is read
/// as an error naming the row and the field — by a listing and by the shard's own read — never as
/// a default (a `parents` read as none would let the shard be read before its parents end).
/// `corrupt` writes the bad value behind the store's back (adapter-specific).
pub async fn a_corrupt_lease_row_is_named<F, Fut>(store: &dyn LeaseStore, name: &str, corrupt: F)
where
    F: Fn(CorruptLease<'static>) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    for field in ["parents", "max_arrival", "checkpoint"] {
        // A row of its own per field, in an application of its own (a listing reads them all).
        let app: &'static str = Box::leak(format!("{name}-corrupt-{field}").into_boxed_str());
        let shards = vec![ShardInfo {
            shard_id: "shard-c".into(),
            parents: vec!["shard-p".into()],
            closed: false,
        }];
        store.ensure_leases(app, &shards).await.unwrap();
        let st = store.shard_state(app, "shard-c").await.unwrap();
        assert_eq!(st.lease.parents, vec!["shard-p".to_owned()]);
        corrupt(CorruptLease {
            app,
            shard: "shard-c",
            field,
        })
        .await;
        for e in [
            store.shard_state(app, "shard-c").await.unwrap_err(),
            store.list_states(app).await.unwrap_err(),
        ] {
            let text = e.to_string();
            assert!(
                matches!(e, PortError::Corrupt { .. })
                    && text.contains(&format!("leases {app}/shard-c"))
                    && text.contains(&format!("`{field}`")),
                "{field}: {text}"
            );
        }
    }
}

/// Lease store: a fleet row whose asks are not what tally writes is read as an error naming the
/// row and `asks` — never as a member asking for nothing (a handoff asked for would be passed
/// over for good). `corrupt(fleet_app, worker)` writes the bad value behind the store's back.
pub async fn a_corrupt_fleet_row_is_named<F, Fut>(store: &dyn LeaseStore, name: &str, corrupt: F)
where
    F: Fn(String, String) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let app = format!("{name}-corrupt-fleet");
    let ask = an_ask();
    store
        .heartbeat(&app, "w2", 9_000, std::slice::from_ref(&ask))
        .await
        .unwrap();
    let fleet = store.fleet(&app, 1_000).await.unwrap();
    assert_eq!(fleet.len(), 1);
    assert_eq!(fleet[0].asks, vec![ask]);
    corrupt(tally_core::ports::fleet_app(&app), "w2".into()).await;
    let e = store.fleet(&app, 1_000).await.unwrap_err();
    let text = e.to_string();
    assert!(
        matches!(e, PortError::Corrupt { .. }) && text.contains("w2") && text.contains("`asks`"),
        "{text}"
    );
}

/// Lease store: a lease row whose request (`wanted_by`) is not a worker's name is read back by
/// the holder's renewal, and by a window's checkpoint that renews, as an error naming the row
/// and `wanted_by` — never as no request (a handoff asked for would be passed over).
/// `corrupt(app, shard)` writes a value of another type behind the store's back.
pub async fn a_corrupt_handoff_ask_is_named<F, Fut>(
    store: &dyn CounterStore,
    name: &str,
    corrupt: F,
) where
    F: Fn(String, String) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let app = format!("{name}-corrupt-ask");
    let held = crate::held_lease(store, &app, "shard-a").await;
    let far = i64::MAX / 2;
    assert!(store.ask_handoff(&held, "b").await.unwrap());
    assert_eq!(
        store
            .renew_lease(&held, far, None, None)
            .await
            .unwrap()
            .as_deref(),
        Some("b")
    );
    corrupt(app.clone(), "shard-a".into()).await;
    let renewal = Renewal {
        expires_ms: far,
        progress: None,
        addr: None,
    };
    let (end, horizon) = (crate::seq("10"), crate::HORIZON_MS.into());
    store
        .begin_window(&held, None, &end.seq, &end, horizon)
        .await
        .unwrap();
    let spent = ShardTally::default();
    let finish = store.finish_window(&held, &end, 1_000, false, &spent, Some(&renewal));
    for e in [
        store.renew_lease(&held, far, None, None).await.unwrap_err(),
        finish.await.unwrap_err(),
    ] {
        let text = e.to_string();
        assert!(
            matches!(e, PortError::Corrupt { .. })
                && text.contains(&format!("leases {app}/shard-a"))
                && text.contains("`wanted_by`"),
            "{text}"
        );
    }
}

/// What worker `w2` asks of `w1` in these tests: its lease of `shard-a` at epoch 3.
fn an_ask() -> Ask {
    Ask {
        shard_id: "shard-a".into(),
        holder: "w1".into(),
        epoch: 3,
    }
}
