//! An app that reads counts straight from the tables, written from `docs/READ-CONTRACT.md` alone
//! (none of tally's code: its own Queries and its own arithmetic), finds the same totals and the
//! same "likes since T" as `tally query`, for every post, on likes spread over three days — on the
//! embedded store's `items` table and on DynamoDB Local — and also on a window half written (a
//! roll's archive and a late add landed before their live write), which both read as before it.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::io::Write;

use crate::common::{file_in, Target};

const HOUR: i64 = 3_600_000;
const DAY: i64 = 24 * HOUR;

/// One item as the contract describes it: its sort key, its numeric attributes, and the marker
/// `w` and last add `ld` an archive may carry.
#[derive(Debug, Clone)]
struct Item {
    sk: String,
    nums: BTreeMap<String, i64>,
    w: String,
    ld: Option<String>,
}

impl Item {
    fn get(&self, k: &str) -> i64 {
        self.nums.get(k).copied().unwrap_or(0)
    }
    fn minutes_from(&self, m: i64) -> i64 {
        (m..60).map(|i| self.get(&format!("m{i:02}"))).sum()
    }
    fn hours_from(&self, h: i64) -> i64 {
        (h..24).map(|i| self.get(&format!("h{i:02}"))).sum()
    }
}

/// `YYYYMMDD` of a day since the epoch (civil calendar, written out here, not tally's).
fn ymd(day: i64) -> String {
    let z = day + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!("{y:04}{m:02}{d:02}")
}

/// The three reads the contract names for "since T", as (live, hour archives, day archives).
struct Reads {
    live: Vec<Item>,
    hours: Vec<Item>,
    days: Vec<Item>,
}

/// An archive as the contract says to read it: as before the window that last wrote it when its
/// `w` is above its shard's live item's (skipped without `ld`, else less what `ld` lists).
fn as_read(archive: &Item, live: &[Item]) -> Option<Item> {
    let shard = archive.sk.split_once('#').unwrap().1;
    let live_w = live
        .iter()
        .find(|l| l.sk == format!("L#{shard}"))
        .map_or("", |l| l.w.as_str());
    if archive.w.as_str() <= live_w {
        return Some(archive.clone());
    }
    let ld = archive.ld.as_ref()?;
    let mut out = archive.clone();
    for part in ld.split(',') {
        let (k, v) = part.split_once(':').unwrap();
        *out.nums.entry(k.to_owned()).or_insert(0) -= v.parse::<i64>().unwrap();
    }
    Some(out)
}

/// The contract's arithmetic: total, and likes since `t`.
fn count(r: &Reads, t: i64) -> (i64, i64) {
    let hours: Vec<Item> = r.hours.iter().filter_map(|a| as_read(a, &r.live)).collect();
    let days: Vec<Item> = r.days.iter().filter_map(|a| as_read(a, &r.live)).collect();
    let total = r.live.iter().map(|i| i.get("n")).sum();
    let (th, tm) = (t.div_euclid(HOUR), t.rem_euclid(HOUR) / 60_000);
    let (td, ts) = (th.div_euclid(24), th.rem_euclid(24));
    let mut since = 0;
    for l in &r.live {
        let hk = l.get("hk");
        if hk == th {
            since += l.minutes_from(tm);
        }
        let day = hk.div_euclid(24);
        if day == td {
            since += l.hours_from(ts + 1);
        } else if day > td {
            since += l.hours_from(0);
        }
    }
    since += hours.iter().map(|h| h.minutes_from(tm)).sum::<i64>();
    let today = format!("D{}#", ymd(td));
    for d in &days {
        if d.sk.starts_with(&today) {
            since += d.hours_from(ts + 1);
        } else {
            since += d.get("n");
        }
    }
    (total, since)
}

/// The sort keys of the contract's three reads for T.
fn key_ranges(t: i64) -> (String, String, String) {
    let th = t.div_euclid(HOUR);
    let (td, ts) = (th.div_euclid(24), th.rem_euclid(24));
    (
        format!("H{}{ts:02}#", ymd(td)),
        format!("D{}#", ymd(td)),
        "D99999999~".to_owned(),
    )
}

/// The embedded store: the `items` table of `tally.db`.
fn read_embedded(t: &Target, post: &str, at: i64) -> Reads {
    let db = rusqlite::Connection::open_with_flags(
        t.dir.path().join("tally.db"),
        rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY,
    )
    .unwrap();
    let mut st = db
        .prepare("SELECT sk, attrs FROM items WHERE pk = ?1")
        .unwrap();
    let all: Vec<Item> = st
        .query_map([post], |r| {
            Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?))
        })
        .unwrap()
        .map(|r| {
            let (sk, attrs) = r.unwrap();
            let v: serde_json::Value = serde_json::from_str(&attrs).unwrap();
            let nums = v
                .as_object()
                .unwrap()
                .iter()
                .filter_map(|(k, v)| Some((k.clone(), v.as_i64()?)))
                .collect();
            let text = |k: &str| v[k].as_str().map(str::to_owned);
            Item {
                sk,
                nums,
                w: text("w").unwrap_or_default(),
                ld: text("ld"),
            }
        })
        .collect();
    let (hour, lo, hi) = key_ranges(at);
    Reads {
        live: all
            .iter()
            .filter(|i| i.sk.starts_with("L#"))
            .cloned()
            .collect(),
        hours: all
            .iter()
            .filter(|i| i.sk.starts_with(&hour))
            .cloned()
            .collect(),
        days: all
            .iter()
            .filter(|i| i.sk.as_str() >= lo.as_str() && i.sk.as_str() <= hi.as_str())
            .cloned()
            .collect(),
    }
}

fn contract_file(t: &Target) -> (std::path::PathBuf, Vec<String>) {
    let path = file_in(t, "days.ndjson");
    let mut f = std::fs::File::create(&path).unwrap();
    let now = crate::common::now_ms();
    let posts: Vec<String> = (0..12).map(|i| format!("rc-p{i}")).collect();
    // 1,200 events over the last three days, some unlikes, at irregular steps.
    for i in 0..1_200i64 {
        let post = &posts[(i * 7 % 12) as usize];
        let at = now - (i * 7_919_113) % (3 * DAY);
        let action = if i % 9 == 0 { "unlike" } else { "like" };
        writeln!(
            f,
            r#"{{"event_id":"rc-{i}","post_id":"{post}","user_id":"u{i}","action":"{action}","created_at":{at}}}"#
        )
        .unwrap();
    }
    (path, posts)
}

fn agrees_with_tally_query(
    t: &Target,
    read: impl Fn(&str, i64) -> Reads,
    plant: impl Fn(&str, &Item),
) {
    let (file, posts) = contract_file(t);
    t.run(&["replay", file.to_str().unwrap()]);
    t.run(&["count", "--until-idle"]);
    let now = crate::common::now_ms();
    let times: Vec<i64> = [
        7 * 60_000,
        90 * 60_000,
        5 * HOUR,
        26 * HOUR,
        50 * HOUR,
        4 * DAY,
    ]
    .iter()
    .map(|d| now - d)
    .collect();
    let agree = |post: &str| -> Vec<(i64, i64)> {
        times
            .iter()
            .map(|at| {
                let q = t.query_one(&["query", post, "--since", &at.to_string(), "--json"]);
                let at = q["since_requested_ms"].as_i64().unwrap();
                let (total, counted_since) = count(&read(post, at), at);
                assert_eq!(total, q["count"].as_i64().unwrap(), "{post}: {q}");
                assert_eq!(
                    counted_since,
                    q["count_since"].as_i64().unwrap(),
                    "{post} since {at}: {q}"
                );
                (total, counted_since)
            })
            .collect()
    };
    let mut was = BTreeMap::new();
    for post in &posts {
        was.insert(post, agree(post));
    }
    // A window half written, as a reader (or a crash) finds it between DynamoDB's writes: a
    // roll's archive put and a late add landed, the live write not yet. The contract's reader
    // reads the post as before that window — as tally does.
    let post = &posts[0];
    let live = read(post, now).live[0].clone();
    let shard = live.sk.trim_start_matches("L#").to_owned();
    let ahead = format!("099{}", "9".repeat(99));
    let hk = live.get("hk");
    let mut minutes: BTreeMap<String, i64> = live
        .nums
        .iter()
        .filter(|(k, _)| k.starts_with('m'))
        .map(|(k, v)| (k.clone(), *v))
        .collect();
    minutes.insert("n".into(), minutes.values().sum());
    plant(
        post,
        &Item {
            sk: format!(
                "H{}{:02}#{shard}",
                ymd(hk.div_euclid(24)),
                hk.rem_euclid(24)
            ),
            nums: minutes,
            w: ahead.clone(),
            ld: None,
        },
    );
    let late_sk = format!("D{}#{shard}", ymd(hk.div_euclid(24) - 1));
    let mut late = read(post, now - 4 * DAY)
        .days
        .into_iter()
        .find(|d| d.sk == late_sk)
        .unwrap_or(Item {
            sk: late_sk,
            nums: BTreeMap::new(),
            w: String::new(),
            ld: None,
        });
    *late.nums.entry("h05".into()).or_insert(0) += 3;
    *late.nums.entry("n".into()).or_insert(0) += 3;
    late.w = ahead;
    late.ld = Some("n:3,h05:3".into());
    plant(post, &late);
    assert_eq!(agree(post), was[post], "{post}: read as before the window");
}

on_backends! {
    a_reader_of_the_contract_agrees_with_tally_query {
        embedded => {
            let t = Target::embedded();
            t.run(&["setup", "--shards", "2"]);
            let db = t.dir.path().join("tally.db");
            agrees_with_tally_query(&t, |post, at| read_embedded(&t, post, at), |post, item| {
                let mut attrs = serde_json::Map::new();
                for (k, v) in &item.nums {
                    attrs.insert(k.clone(), (*v).into());
                }
                attrs.insert("w".into(), item.w.clone().into());
                if let Some(ld) = &item.ld {
                    attrs.insert("ld".into(), ld.clone().into());
                }
                rusqlite::Connection::open(&db)
                    .unwrap()
                    .execute(
                        "INSERT OR REPLACE INTO items (pk, sk, attrs) VALUES (?1, ?2, ?3)",
                        rusqlite::params![post, item.sk, serde_json::Value::Object(attrs).to_string()],
                    )
                    .unwrap();
            });
        },
        aws => {
            use aws_sdk_dynamodb::types::AttributeValue;
            let t = Target::aws("contract", 2);
            let table = t.table("counts");
            let rt = tokio::runtime::Runtime::new().unwrap();
            let client = crate::common::dynamodb_client();
            let query = |post: &str, cond: &str, a: &str, b: Option<&str>| -> Vec<Item> {
                let mut q = client
                    .query()
                    .table_name(&table)
                    .consistent_read(true)
                    .key_condition_expression(format!("pk = :p AND {cond}"))
                    .expression_attribute_values(":p", AttributeValue::S(post.into()))
                    .expression_attribute_values(":a", AttributeValue::S(a.into()));
                if let Some(b) = b {
                    q = q.expression_attribute_values(":b", AttributeValue::S(b.into()));
                }
                let out = rt.block_on(q.send()).unwrap();
                out.items()
                    .iter()
                    .map(|it| Item {
                        sk: it["sk"].as_s().unwrap().clone(),
                        nums: it
                            .iter()
                            .filter_map(|(k, v)| Some((k.clone(), v.as_n().ok()?.parse().ok()?)))
                            .collect(),
                        w: it.get("w").and_then(|v| v.as_s().ok()).cloned().unwrap_or_default(),
                        ld: it.get("ld").and_then(|v| v.as_s().ok()).cloned(),
                    })
                    .collect()
            };
            let plant = |post: &str, item: &Item| {
                let mut put = client
                    .put_item()
                    .table_name(&table)
                    .item("pk", AttributeValue::S(post.into()))
                    .item("sk", AttributeValue::S(item.sk.clone()))
                    .item("w", AttributeValue::S(item.w.clone()));
                for (k, v) in &item.nums {
                    put = put.item(k, AttributeValue::N(v.to_string()));
                }
                if let Some(ld) = &item.ld {
                    put = put.item("ld", AttributeValue::S(ld.clone()));
                }
                rt.block_on(put.send()).unwrap();
            };
            agrees_with_tally_query(&t, |post, at| {
                let (hour, lo, hi) = key_ranges(at);
                Reads {
                    live: query(post, "begins_with(sk, :a)", "L#", None),
                    hours: query(post, "begins_with(sk, :a)", &hour, None),
                    days: query(post, "sk BETWEEN :a AND :b", &lo, Some(&hi)),
                }
            }, plant);
        },
    }
}
