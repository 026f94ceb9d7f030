//! Terraform cannot be planned here, so its drift from the code is checked by parsing it
//! (hcl-rs): the tables' names, keys and TTLs, the tasks' environment, and the IAM actions must
//! match what the code really uses.
#![allow(clippy::unwrap_used)]

mod common;

use std::collections::{BTreeMap, BTreeSet};

use hcl::{Block, Body, Expression, ObjectKey};

fn terraform() -> Vec<Body> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("terraform");
    let mut bodies = Vec::new();
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "tf") {
            let text = std::fs::read_to_string(&path).unwrap();
            bodies.push(
                hcl::from_str::<Body>(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display())),
            );
        }
    }
    assert!(bodies.len() >= 5, "terraform/*.tf found");
    bodies
}

fn blocks<'a>(bodies: &'a [Body], kind: &'a str) -> impl Iterator<Item = &'a Block> + 'a {
    bodies
        .iter()
        .flat_map(|b| b.blocks())
        .filter(move |b| b.identifier() == kind)
}

fn key_name(k: &ObjectKey) -> String {
    match k {
        ObjectKey::Identifier(i) => i.to_string(),
        ObjectKey::Expression(Expression::String(s)) => s.clone(),
        other => panic!("unexpected object key {other:?}"),
    }
}

fn local(bodies: &[Body], name: &str) -> Expression {
    blocks(bodies, "locals")
        .flat_map(|b| b.body().attributes())
        .find(|a| a.key() == name)
        .unwrap_or_else(|| panic!("local {name}"))
        .expr()
        .clone()
}

fn object(e: &Expression) -> BTreeMap<String, Expression> {
    match e {
        Expression::Object(o) => o.iter().map(|(k, v)| (key_name(k), v.clone())).collect(),
        other => panic!("expected an object, got {other:?}"),
    }
}

fn string(e: &Expression) -> String {
    match e {
        Expression::String(s) => s.clone(),
        other => panic!("expected a string, got {other:?}"),
    }
}

#[test]
fn tables_match_the_code() {
    let bodies = terraform();
    let tables = object(&local(&bodies, "tables"));
    let code: BTreeMap<String, (String, String, String)> = tally_aws::dynamo::TABLES
        .iter()
        .map(|(s, h, r, t)| {
            (
                s.to_string(),
                (h.to_string(), r.to_string(), t.unwrap_or("").to_string()),
            )
        })
        .collect();
    let tf: BTreeMap<String, (String, String, String)> = tables
        .iter()
        .map(|(suffix, v)| {
            let o = object(v);
            (
                suffix.clone(),
                (
                    string(&o["hash_key"]),
                    string(&o["range_key"]),
                    string(&o["ttl"]),
                ),
            )
        })
        .collect();
    assert_eq!(tf, code);
}

/// The actions of every statement of a policy document.
fn policy_actions(bodies: &[Body], name: &str) -> BTreeSet<String> {
    let doc = blocks(bodies, "data")
        .find(|b| {
            b.labels().iter().map(|l| l.as_str()).collect::<Vec<_>>()
                == ["aws_iam_policy_document", name]
        })
        .unwrap_or_else(|| panic!("policy document {name}"));
    doc.body()
        .blocks()
        .filter(|b| b.identifier() == "statement")
        .flat_map(|s| {
            s.body()
                .attributes()
                .filter(|a| a.key() == "actions")
                .cloned()
                .collect::<Vec<_>>()
        })
        .flat_map(|a| match a.expr() {
            Expression::Array(items) => items.iter().map(string).collect::<Vec<_>>(),
            other => panic!("actions must be a list, got {other:?}"),
        })
        .collect()
}

fn only(actions: &BTreeSet<String>, service: &str) -> BTreeSet<String> {
    actions
        .iter()
        .filter(|a| a.starts_with(&format!("{service}:")))
        .cloned()
        .collect()
}

fn set(a: &[&str]) -> BTreeSet<String> {
    a.iter().map(|s| s.to_string()).collect()
}

#[test]
fn iam_grants_exactly_what_the_code_calls() {
    let bodies = terraform();
    let consumer = policy_actions(&bodies, "consumer");
    assert_eq!(
        only(&consumer, "kinesis"),
        set(tally_aws::KINESIS_CONSUMER_ACTIONS)
    );
    assert_eq!(
        only(&consumer, "dynamodb"),
        set(tally_aws::DYNAMODB_CONSUMER_ACTIONS)
    );
    let producer = policy_actions(&bodies, "producer");
    assert_eq!(
        only(&producer, "kinesis"),
        set(tally_aws::KINESIS_PRODUCER_ACTIONS)
    );
    assert_eq!(
        only(&producer, "dynamodb"),
        set(tally_aws::DYNAMODB_PRODUCER_ACTIONS)
    );
    for a in consumer.iter().chain(&producer) {
        assert!(!a.contains('*'), "no wildcard actions: {a}");
    }
}

#[test]
fn task_environment_is_valid_tally_configuration() {
    let bodies = terraform();
    let env = object(&local(&bodies, "tally_env"));
    assert!(
        env.contains_key("TALLY_BACKEND")
            && env.contains_key("TALLY_STREAM")
            && env.contains_key("TALLY_TABLE_PREFIX")
    );
    // tally itself judges the keys: an unknown TALLY_* key or a bad value fails `tally config`.
    let t = common::Target::embedded();
    let vars: Vec<(String, String)> = env
        .iter()
        .filter(|(k, _)| k.starts_with("TALLY_"))
        .map(|(k, v)| {
            let v = match v {
                Expression::String(s) => s.clone(),
                _ => "tally-test".to_string(), // a variable reference
            };
            (k.clone(), v)
        })
        .collect();
    let env_refs: Vec<(&str, &str)> = vars.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let out = t.run_env(&["config"], &env_refs);
    assert!(out.contains("backend = \"aws\""), "{out}");
}

#[test]
fn alarms_on_tally_metrics_use_what_the_workers_emit() {
    let bodies = terraform();
    let env = object(&local(&bodies, "tally_env"));
    assert_eq!(
        env.get("TALLY_METRICS__EMF").map(string).as_deref(),
        Some("true"),
        "the tasks emit EMF metrics"
    );
    let emitted = |metric: &str| {
        tally_consumer::worker::metric::ALL.contains(&metric)
            || tally_analytics::metric::ALL.contains(&metric)
    };
    // The per-application alarms, one spec each.
    let specs = object(&local(&bodies, "app_alarms"));
    assert!(specs.len() >= 3, "{:?}", specs.keys());
    for (name, spec) in &specs {
        let metric = string(&object(spec)["metric"]);
        assert!(
            emitted(&metric),
            "alarm {name} on {metric}, which tally does not emit"
        );
    }
    // Single alarms on tally's namespace (a variable; AWS namespaces are literal strings).
    let mut single = 0;
    for alarm in blocks(&bodies, "resource")
        .filter(|b| b.labels().first().map(|l| l.as_str()) == Some("aws_cloudwatch_metric_alarm"))
    {
        let attr = |name: &str| {
            alarm
                .body()
                .attributes()
                .find(|a| a.key() == name)
                .map(|a| a.expr().clone())
        };
        if matches!(attr("namespace"), Some(Expression::String(_))) {
            continue;
        }
        let Some(Expression::String(metric)) = attr("metric_name") else {
            continue; // the per-application alarms, checked above
        };
        single += 1;
        assert!(
            emitted(&metric),
            "alarm on {metric}, which tally does not emit"
        );
        let dims = object(&attr("dimensions").unwrap());
        assert!(
            dims.keys().all(|d| d == "App" || d == "ShardId"),
            "alarm on {metric} with dimensions {:?}",
            dims.keys()
        );
    }
    assert!(single >= 1, "the like latency alarm");
}
