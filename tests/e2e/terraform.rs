//! Terraform cannot be planned here, so its drift from the code is checked by parsing it
//! (hcl-rs): the tables' names, keys and TTLs, the tasks' environment, and the IAM actions must
//! match what the code really uses.
#![allow(clippy::unwrap_used)]

use std::collections::{BTreeMap, BTreeSet};

use hcl::{Block, Body, Expression, ObjectKey};

use crate::common::iam;

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

/// The edges table's recent index is the one the code queries: its name, keys and the number
/// attribute it sorts by (`tally_core::edge::RECENT_INDEX`, `LIKED_AT_ATTR`), keys only; on the
/// edges table alone (where `tally setup` puts it and the likers are read), when
/// `recent_likers_index` asks for it.
#[test]
fn the_recent_index_is_the_one_the_code_reads() {
    let bodies = terraform();
    let table = blocks(&bodies, "resource")
        .find(|b| {
            b.labels()
                .iter()
                .any(|l| l.as_str() == "aws_dynamodb_table")
        })
        .expect("the tables' resource");
    let content = |kind: &str| -> BTreeMap<String, String> {
        let dynamic = table
            .body()
            .blocks()
            .find(|b| b.identifier() == "dynamic" && b.labels().iter().any(|l| l.as_str() == kind))
            .unwrap_or_else(|| panic!("dynamic {kind}"));
        assert_eq!(
            attr_text(dynamic, "for_each").as_deref(),
            Some("each.key == \"edges\" && var.recent_likers_index ? [1] : []"),
            "{kind}: on the edges table, with recent_likers_index"
        );
        assert!(
            tally_aws::dynamo::TABLES.iter().any(|t| t.0 == "edges"),
            "the code has an edges table"
        );
        let c = dynamic
            .body()
            .blocks()
            .find(|b| b.identifier() == "content")
            .unwrap();
        c.body()
            .attributes()
            .map(|a| (a.key().to_owned(), string(a.expr())))
            .collect()
    };
    let gsi = content("global_secondary_index");
    let want = |k: &str, v: &str| assert_eq!(gsi.get(k).map(String::as_str), Some(v), "{gsi:?}");
    want("name", tally_core::edge::RECENT_INDEX);
    want("hash_key", "pk");
    want("range_key", tally_core::edge::LIKED_AT_ATTR);
    want("projection_type", "KEYS_ONLY");
    let attr = content("attribute");
    assert_eq!(attr["name"], tally_core::edge::LIKED_AT_ATTR);
    assert_eq!(attr["type"], "N");
}

/// The statements of a policy document.
fn statements<'a>(bodies: &'a [Body], name: &str) -> Vec<&'a Block> {
    let doc = blocks(bodies, "data")
        .find(|b| {
            b.labels().iter().map(|l| l.as_str()).collect::<Vec<_>>()
                == ["aws_iam_policy_document", name]
        })
        .unwrap_or_else(|| panic!("policy document {name}"));
    doc.body()
        .blocks()
        .filter(|b| b.identifier() == "statement")
        .collect()
}

/// The actions of one statement.
fn statement_actions(s: &Block) -> BTreeSet<String> {
    s.body()
        .attributes()
        .filter(|a| a.key() == "actions")
        .flat_map(|a| match a.expr() {
            Expression::Array(items) => items.iter().map(string).collect::<Vec<_>>(),
            other => panic!("actions must be a list, got {other:?}"),
        })
        .collect()
}

/// The actions of every statement of a policy document.
fn policy_actions(bodies: &[Body], name: &str) -> BTreeSet<String> {
    statements(bodies, name)
        .into_iter()
        .flat_map(statement_actions)
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
fn iam_grants_each_role_exactly_what_the_code_calls() {
    let bodies = terraform();
    let roles: [(&str, &[&str], &[&str]); 4] = [
        // Both applications' roles carry the one worker document (terraform/iam.tf).
        (
            "worker",
            iam::KINESIS_CONSUMER_ACTIONS,
            iam::DYNAMODB_COUNTER_ACTIONS,
        ),
        (
            "worker",
            iam::KINESIS_CONSUMER_ACTIONS,
            iam::DYNAMODB_ANALYTICS_ACTIONS,
        ),
        (
            "producer",
            iam::KINESIS_PRODUCER_ACTIONS,
            iam::DYNAMODB_PRODUCER_ACTIONS,
        ),
        (
            "operator",
            iam::KINESIS_OPERATOR_ACTIONS,
            iam::DYNAMODB_OPERATOR_ACTIONS,
        ),
    ];
    for (role, kinesis, dynamodb) in roles {
        let actions = policy_actions(&bodies, role);
        assert_eq!(only(&actions, "kinesis"), set(kinesis), "{role}");
        assert_eq!(only(&actions, "dynamodb"), set(dynamodb), "{role}");
        for a in &actions {
            assert!(!a.contains('*'), "no wildcard actions: {role}: {a}");
        }
        // A worker reads the KMS-encrypted stream (Decrypt); only a producer writes to it.
        let kms = only(&actions, "kms");
        let expected = if role == "producer" {
            "kms:GenerateDataKey"
        } else {
            "kms:Decrypt"
        };
        assert_eq!(kms, set(&[expected]), "{role}");
    }
    // The edges' change log is read on the edges table's stream, and only there: the DynamoDB
    // Streams actions act on `<table ARN>/stream/<label>` (a new label whenever the stream is
    // turned off and on), never on a table; no other statement grants anything on a stream.
    let streams: BTreeSet<String> = DYNAMODB_STREAMS_CALLS
        .iter()
        .map(|(_, a)| a.to_string())
        .collect();
    assert!(
        streams.is_subset(&set(iam::DYNAMODB_COUNTER_ACTIONS)),
        "the counter reads the change log"
    );
    for role in ["worker", "producer", "operator", "serve", "router"] {
        for st in statements(&bodies, role) {
            let actions = statement_actions(st);
            let resources: String = attr_text(st, "resources")
                .unwrap()
                .split_whitespace()
                .collect();
            if actions.is_disjoint(&streams) && !resources.contains("/stream/") {
                continue;
            }
            // The workers count from it; the operator's `tally verify` adds what it logged
            // that the counter has not counted yet.
            assert!(
                ["worker", "operator"].contains(&role),
                "{role} reads no change log: {actions:?}"
            );
            assert_eq!(actions, streams, "{resources}");
            assert_eq!(
                resources,
                "[\"${aws_dynamodb_table.tally[\"edges\"].arn}/stream/*\"]"
            );
        }
    }
    for role in ["worker", "operator"] {
        assert!(only(&policy_actions(&bodies, role), "dynamodb").is_superset(&streams));
    }
    // The router (several regions) puts to the other regions' streams, nothing more, besides
    // the worker document its role carries as the consumers' do.
    let router = policy_actions(&bodies, "router");
    assert_eq!(
        only(&router, "kinesis"),
        set(iam::KINESIS_ROUTER_PUT_ACTIONS)
    );
    assert_eq!(only(&router, "kms"), set(&["kms:GenerateDataKey"]));
    assert_eq!(router.len(), iam::KINESIS_ROUTER_PUT_ACTIONS.len() + 1);
    // The read side reads the tables and checks the stream, nothing more (no records, no key).
    let serve = policy_actions(&bodies, "serve");
    assert_eq!(only(&serve, "kinesis"), set(iam::KINESIS_SERVE_ACTIONS));
    assert_eq!(only(&serve, "dynamodb"), set(iam::DYNAMODB_SERVE_ACTIONS));
    assert_eq!(
        serve.len(),
        iam::KINESIS_SERVE_ACTIONS.len() + iam::DYNAMODB_SERVE_ACTIONS.len()
    );
    for a in &serve {
        assert!(
            ["Describe", "Get", "Query", "Scan"]
                .iter()
                .any(|r| a.contains(r)),
            "the read side only reads: {a}"
        );
    }
    // A backfill reads the application's own table, nothing of tally's (the producer's policy
    // puts its records).
    let backfill = policy_actions(&bodies, "backfill");
    assert_eq!(backfill, set(iam::DYNAMODB_BACKFILL_ACTIONS));
    // The workers never scan: listing dead letters is the operator's.
    assert!(!iam::DYNAMODB_COUNTER_ACTIONS.contains(&"dynamodb:Scan"));
    assert!(!iam::DYNAMODB_ANALYTICS_ACTIONS.contains(&"dynamodb:Scan"));
}

/// Calls of the Kinesis client, as IAM actions.
const KINESIS_CALLS: &[(&str, &str)] = &[
    (
        ".describe_stream_summary()",
        "kinesis:DescribeStreamSummary",
    ),
    (".list_shards()", "kinesis:ListShards"),
    (".get_shard_iterator()", "kinesis:GetShardIterator"),
    (".get_records()", "kinesis:GetRecords"),
    (".put_records()", "kinesis:PutRecords"),
    (
        ".register_stream_consumer()",
        "kinesis:RegisterStreamConsumer",
    ),
    (
        ".describe_stream_consumer()",
        "kinesis:DescribeStreamConsumer",
    ),
    (".subscribe_to_shard()", "kinesis:SubscribeToShard"),
];

/// Calls of the DynamoDB Streams client (the edges' change log, `aws/src/edge_log.rs`): the
/// Kinesis client has methods of the same names, which are other actions (`kinesis:GetRecords`).
const DYNAMODB_STREAMS_CALLS: &[(&str, &str)] = &[
    (".describe_stream()", "dynamodb:DescribeStream"),
    (".get_shard_iterator()", "dynamodb:GetShardIterator"),
    (".get_records()", "dynamodb:GetRecords"),
];

/// Calls of the DynamoDB client (and a transaction's parts, `TransactWriteItem::builder().put(…)`).
const DYNAMODB_CALLS: &[(&str, &str)] = &[
    (".describe_table()", "dynamodb:DescribeTable"),
    (".get_item()", "dynamodb:GetItem"),
    (".put_item()", "dynamodb:PutItem"),
    (".update_item()", "dynamodb:UpdateItem"),
    (".delete_item()", "dynamodb:DeleteItem"),
    (".query()", "dynamodb:Query"),
    (".scan()", "dynamodb:Scan"),
    (
        ".describe_kinesis_streaming_destination()",
        "dynamodb:DescribeKinesisStreamingDestination",
    ),
    ("builder().put(", "dynamodb:PutItem"),
    ("builder().update(", "dynamodb:UpdateItem"),
    ("builder().delete(", "dynamodb:DeleteItem"),
    ("builder().condition_check(", "dynamodb:ConditionCheckItem"),
    (".batch_write_item()", "dynamodb:BatchWriteItem"),
    (".batch_get_item()", "dynamodb:BatchGetItem"),
];

/// A source file without its test modules (they close a file, `#[cfg(test)] mod …`): what the
/// tests call on a local peer is no grant the applications need.
fn without_tests(file: &std::path::Path, text: &str) -> String {
    let lines: Vec<&str> = text.lines().collect();
    let cut = lines.iter().position(|l| {
        let l = l.trim_start();
        l.starts_with("#[cfg(test)]") || l.starts_with("#[cfg(all(test")
    });
    let Some(cut) = cut else {
        return text.to_owned();
    };
    let next = lines[cut + 1..].iter().find(|l| !l.trim().is_empty());
    assert!(
        next.is_some_and(|l| l.trim_start().starts_with("mod ")),
        "{}: a test-only item at line {} that is no module: the scan cuts the file there",
        file.display(),
        cut + 1
    );
    lines[..cut].join("\n")
}

/// The SDK operations the AWS adapter calls, read from its source (`.put_item()`, and a
/// transaction's parts, `TransactWriteItem::builder().put(…)`), as IAM actions: every file of
/// `aws/src` but `setup.rs` (the development `tally setup`) and `baselines.rs` (the demo's
/// comparison), which run nowhere in production, and but their tests. Kinesis and DynamoDB
/// Streams share method names (`.get_records()`): a file's such calls are those of the one of the
/// two clients it uses (`aws_sdk_kinesis`, `aws_sdk_dynamodbstreams`), and a file that names both
/// or neither fails here rather than be guessed.
fn actions_called_in_source() -> BTreeSet<String> {
    fn rust_files(dir: &std::path::Path, out: &mut Vec<std::path::PathBuf>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                rust_files(&p, out);
            } else if p.extension().is_some_and(|x| x == "rs") {
                out.push(p);
            }
        }
    }
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("aws/src");
    let mut files = Vec::new();
    rust_files(&dir, &mut files);
    files.retain(|p| !p.ends_with("setup.rs") && !p.ends_with("dynamo/baselines.rs"));
    assert!(
        files.iter().any(|p| p.ends_with("edge_log.rs")),
        "the edges' change log is scanned: {files:?}"
    );
    let squeeze = |s: &str| -> String { s.split_whitespace().collect() };
    let mut called = BTreeSet::new();
    for f in files {
        let source = std::fs::read_to_string(&f).unwrap();
        let text = squeeze(&without_tests(&f, &source));
        for (call, action) in DYNAMODB_CALLS {
            if text.contains(&squeeze(call)) {
                called.insert(action.to_string());
            }
        }
        let clients = [
            ("aws_sdk_kinesis", KINESIS_CALLS),
            ("aws_sdk_dynamodbstreams", DYNAMODB_STREAMS_CALLS),
        ];
        let calls: BTreeSet<&str> = clients
            .iter()
            .flat_map(|(_, calls)| calls.iter().map(|(c, _)| *c))
            .filter(|c| text.contains(&squeeze(c)))
            .collect();
        for call in calls {
            let of: Vec<&str> = clients
                .iter()
                .filter(|(krate, _)| text.contains(krate))
                .filter_map(|(_, calls)| calls.iter().find(|(c, _)| *c == call))
                .map(|(_, action)| *action)
                .collect();
            assert_eq!(
                of.len(),
                1,
                "{}: {call} is a call of which client? (it uses {:?})",
                f.display(),
                clients
                    .iter()
                    .filter(|(krate, _)| text.contains(krate))
                    .map(|(krate, _)| *krate)
                    .collect::<Vec<_>>()
            );
            called.insert(of[0].to_owned());
        }
    }
    called
}

/// Every action granted to some role is called by the code, and every call is granted: an
/// over-grant (an action nothing calls) fails as surely as a missing one.
#[test]
fn the_grants_are_the_code_s_calls() {
    let granted: BTreeSet<String> = [
        iam::KINESIS_CONSUMER_ACTIONS,
        iam::KINESIS_PRODUCER_ACTIONS,
        iam::KINESIS_OPERATOR_ACTIONS,
        iam::DYNAMODB_COUNTER_ACTIONS,
        iam::DYNAMODB_ANALYTICS_ACTIONS,
        iam::DYNAMODB_PRODUCER_ACTIONS,
        iam::DYNAMODB_OPERATOR_ACTIONS,
        iam::KINESIS_SERVE_ACTIONS,
        iam::DYNAMODB_SERVE_ACTIONS,
        iam::DYNAMODB_BACKFILL_ACTIONS,
    ]
    .iter()
    .flat_map(|a| a.iter().map(|s| s.to_string()))
    .collect();
    assert_eq!(granted, actions_called_in_source());
}

/// The variables' defaults, with values for those that have none (as a tfvars file would give),
/// as the `var` object; then `local` as far as the env needs it: what Terraform would compute.
fn eval_context(bodies: &[Body], given: &[(&str, hcl::Value)]) -> hcl::eval::Context<'static> {
    use hcl::eval::{Context, Evaluate, FuncArgs, FuncDef, ParamType};
    let mut var = hcl::Map::new();
    for v in blocks(bodies, "variable") {
        let name = v.labels()[0].as_str().to_owned();
        if let Some(d) = v.body().attributes().find(|a| a.key() == "default") {
            var.insert(name, d.expr().evaluate(&Context::new()).unwrap());
        }
    }
    for (k, v) in given {
        var.insert(k.to_string(), v.clone());
    }
    let mut ctx = Context::new();
    ctx.declare_var("var", hcl::Value::Object(var));
    ctx.declare_func(
        "tostring",
        FuncDef::new(
            |a: FuncArgs| {
                Ok(match &a[0] {
                    hcl::Value::String(s) => hcl::Value::String(s.clone()),
                    hcl::Value::Number(n) => hcl::Value::String(n.to_string()),
                    other => hcl::Value::String(other.to_string()),
                })
            },
            [ParamType::Any],
        ),
    );
    ctx.declare_func(
        "coalesce",
        FuncDef::builder()
            .variadic_param(ParamType::Any)
            .build(|a: FuncArgs| {
                a.iter()
                    .find(|v| !v.is_null())
                    .cloned()
                    .ok_or_else(|| "coalesce: all null".to_string())
            }),
    );
    let mut locals = hcl::Map::new();
    for name in ["name", "stream_name", "table_prefix", "health_port"] {
        let v = local(bodies, name).evaluate(&ctx).unwrap();
        locals.insert(name.to_owned(), v);
    }
    ctx.declare_var("local", hcl::Value::Object(locals));
    ctx
}

/// The tasks' environment as Terraform would set it, with these variable values.
fn task_env(bodies: &[Body], given: &[(&str, hcl::Value)]) -> BTreeMap<String, String> {
    use hcl::eval::Evaluate;
    let ctx = eval_context(bodies, given);
    object(&local(bodies, "tally_env"))
        .into_iter()
        .map(|(k, e)| match e.evaluate(&ctx).unwrap() {
            hcl::Value::String(s) => (k, s),
            other => panic!("{k} = {other:?} is not a string"),
        })
        .collect()
}

fn required_vars() -> Vec<(&'static str, hcl::Value)> {
    vec![
        ("region", "eu-west-1".into()),
        ("image", format!("r/tally@sha256:{}", "0".repeat(64)).into()),
        ("vpc_id", "vpc-1".into()),
        (
            "subnet_ids",
            hcl::Value::Array(vec!["subnet-1".into(), "subnet-2".into()]),
        ),
    ]
}

#[test]
fn task_environment_is_valid_tally_configuration() {
    let bodies = terraform();
    let mut given = required_vars();
    given.push(("environment", "staging".into()));
    given.push(("stop_timeout_secs", 90.into()));
    given.push(("retention_hours", 72.into()));
    given.push(("counter_read_mode", "efo".into()));
    let env = task_env(&bodies, &given);
    // Names follow the environment, so that two environments can share an account.
    assert_eq!(env["TALLY_STREAM"], "tally-staging-likes");
    assert_eq!(env["TALLY_TABLE_PREFIX"], "tally-staging");
    // The dedup records' TTL follows the stream's retention.
    assert_eq!(env["TALLY_STREAM_RETENTION_HOURS"], "72");
    // One value decides both the stop timeout and the flush deadline, with room for the release.
    assert_eq!(env["TALLY_LEASE__SHUTDOWN_TIMEOUT_MS"], "80000");
    let tf = text("ecs.tf");
    assert!(
        tf.contains("stopTimeout = var.stop_timeout_secs"),
        "stopTimeout from the variable"
    );
    // tally itself judges the keys and values: an unknown TALLY_* key or a bad value fails.
    let t = crate::common::Target::embedded();
    let vars: Vec<(&str, &str)> = env
        .iter()
        .filter(|(k, _)| k.starts_with("TALLY_"))
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    let v = t.json_env(&["config", "--json"], &vars);
    assert_eq!(v["backend"], "aws", "{v}");
    assert_eq!(v["lease"]["shutdown_timeout_ms"], 80_000, "{v}");
    assert_eq!(v["stream_retention_hours"], 72, "{v}");
    assert_eq!(v["counter"]["read_mode"], "efo", "{v}");
    assert_eq!(v["analytics"]["read_mode"], "polling", "{v}");
}

/// With several regions every task gets `local.regions_env`: evaluated as Terraform would for two
/// regions, tally reads each key as the setting meant (the other home's stream, region and
/// tables: what the router puts to and what the read side reads that home's posts from).
#[test]
fn the_regions_environment_is_valid_tally_configuration() {
    use hcl::eval::{Evaluate, FuncArgs, FuncDef, ParamType};
    let bodies = terraform();
    let peer = hcl::Value::Object(hcl::Map::from_iter([
        ("stream".to_owned(), "tally-prod-eu-likes".into()),
        ("aws_region".to_owned(), "eu-west-1".into()),
        ("table_prefix".to_owned(), "tally-prod-eu".into()),
        (
            "kms_key_arn".to_owned(),
            "arn:aws:kms:eu-west-1:1:key/k".into(),
        ),
    ]));
    let regions = hcl::Value::Object(hcl::Map::from_iter([
        ("this".to_owned(), "us".into()),
        (
            "homes".to_owned(),
            hcl::Value::Array(vec!["us".into(), "eu".into()]),
        ),
        (
            "peers".to_owned(),
            hcl::Value::Object(hcl::Map::from_iter([("eu".to_owned(), peer)])),
        ),
    ]));
    let mut given = required_vars();
    given.push(("regions", regions));
    let mut ctx = eval_context(&bodies, &given);
    let string = |v: &hcl::Value| match v {
        hcl::Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    ctx.declare_func(
        "upper",
        FuncDef::new(
            |a: FuncArgs| {
                let s = a[0].as_str().unwrap_or_default().to_uppercase();
                Ok(hcl::Value::String(s))
            },
            [ParamType::Any],
        ),
    );
    ctx.declare_func(
        "join",
        FuncDef::new(
            |a: FuncArgs| {
                let items = a[1].as_array().cloned().unwrap_or_default();
                let parts: Vec<String> = items
                    .iter()
                    .map(|v| v.as_str().unwrap_or_default().to_owned())
                    .collect();
                Ok(hcl::Value::String(
                    parts.join(a[0].as_str().unwrap_or_default()),
                ))
            },
            [ParamType::Any, ParamType::Any],
        ),
    );
    ctx.declare_func(
        "merge",
        FuncDef::builder()
            .variadic_param(ParamType::Any)
            .build(|a: FuncArgs| {
                let mut out = hcl::Map::new();
                for v in a.iter() {
                    if let Some(o) = v.as_object() {
                        out.extend(o.clone());
                    }
                }
                Ok(hcl::Value::Object(out))
            }),
    );
    list_funcs(&mut ctx);
    let mut locals = ctx_locals(&bodies, &ctx);
    let routes = local(&bodies, "routes").evaluate(&ctx).unwrap();
    locals.insert("routes".to_owned(), routes);
    ctx.declare_var("local", hcl::Value::Object(locals));
    let env = match local(&bodies, "regions_env").evaluate(&ctx).unwrap() {
        hcl::Value::Object(o) => o,
        other => panic!("regions_env = {other:?}"),
    };
    let vars: Vec<(String, String)> = env.iter().map(|(k, v)| (k.clone(), string(v))).collect();
    assert!(
        vars.iter()
            .any(|(k, _)| k == "TALLY_REGIONS__PEERS__EU__TABLE_PREFIX"),
        "{vars:?}"
    );
    let t = crate::common::Target::embedded();
    let pairs: Vec<(&str, &str)> = vars.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let v = t.json_env(&["config", "--json"], &pairs);
    let r = &v["regions"];
    assert_eq!(r["this"], "us", "{v}");
    assert_eq!(r["homes"], serde_json::json!(["us", "eu"]), "{v}");
    // Environment keys are lowercased: the peer is `eu` whatever case Terraform wrote.
    let eu = &r["peers"]["eu"];
    assert_eq!(eu["stream"], "tally-prod-eu-likes", "{v}");
    assert_eq!(eu["aws_region"], "eu-west-1", "{v}");
    assert_eq!(eu["table_prefix"], "tally-prod-eu", "{v}");
    // The tables replicated are those the read side checks and reads of another home, and the
    // edges: a post's likers and a feed page's viewer likes are read from its home's edges table
    // (`tally_aws::dynamo::likers`, through the peer's store), which tally_aws::REPLICATED_TABLES
    // does not list (yet: then the union below is that list alone).
    let replicated: BTreeSet<String> = match local(&bodies, "replicated").evaluate(&ctx).unwrap() {
        hcl::Value::Array(v) => v.iter().map(|t| t.as_str().unwrap().to_owned()).collect(),
        other => panic!("replicated = {other:?}"),
    };
    let mut read_of_a_home = set(tally_aws::REPLICATED_TABLES);
    read_of_a_home.insert("edges".to_owned());
    assert_eq!(replicated, read_of_a_home);
    // The read side's tables are replicated here: the serve and operator roles may read them.
    let tf = text("serve.tf") + &text("iam.tf");
    assert_eq!(
        tf.matches("local.peer_table_arns").count(),
        2,
        "serve and operator read them"
    );
}

/// Terraform's `length`, `concat`, `distinct` and `contains`, as far as lists and maps of
/// strings need them.
fn list_funcs(ctx: &mut hcl::eval::Context<'_>) {
    use hcl::eval::{FuncArgs, FuncDef, ParamType};
    ctx.declare_func(
        "length",
        FuncDef::new(
            |a: FuncArgs| {
                let n = match &a[0] {
                    hcl::Value::Array(v) => v.len(),
                    hcl::Value::Object(o) => o.len(),
                    _ => 0,
                };
                Ok(hcl::Value::from(n as u64))
            },
            [ParamType::Any],
        ),
    );
    ctx.declare_func(
        "concat",
        FuncDef::builder()
            .variadic_param(ParamType::Any)
            .build(|a: FuncArgs| {
                let mut out = Vec::new();
                for v in a.iter() {
                    out.extend(v.as_array().cloned().ok_or("concat: not a list")?);
                }
                Ok(hcl::Value::Array(out))
            }),
    );
    ctx.declare_func(
        "distinct",
        FuncDef::new(
            |a: FuncArgs| {
                let mut out: Vec<hcl::Value> = Vec::new();
                for v in a[0].as_array().ok_or("distinct: not a list")? {
                    if !out.contains(v) {
                        out.push(v.clone());
                    }
                }
                Ok(hcl::Value::Array(out))
            },
            [ParamType::Any],
        ),
    );
    ctx.declare_func(
        "contains",
        FuncDef::new(
            |a: FuncArgs| {
                let list = a[0].as_array().ok_or("contains: not a list")?;
                Ok(hcl::Value::Bool(list.contains(&a[1])))
            },
            [ParamType::Any, ParamType::Any],
        ),
    );
}

/// The edges' change log is DynamoDB Streams on the edges table with both images (the like before
/// and after a change: `tally_aws::edge_log` refuses a stream without them), on in every
/// deployment; with several regions the edges table is a global table exactly when the counts
/// table is (the read side reads a post's likers from its home), and every replicated table has
/// the stream replication needs. Evaluated as Terraform would, for one region and for two.
#[test]
fn the_edges_change_log_is_always_on_and_replicated_with_the_counts() {
    use hcl::eval::Evaluate;
    let bodies = terraform();
    let table = resource(&bodies, "aws_dynamodb_table", "tally");
    let replica_for_each = table
        .body()
        .blocks()
        .find(|b| b.identifier() == "dynamic" && b.labels()[0].as_str() == "replica")
        .map(|b| attr_expr(b, "for_each"))
        .expect("dynamic replica");
    let peers = hcl::Value::Object(hcl::Map::from_iter([(
        "eu".to_owned(),
        hcl::Value::Object(hcl::Map::from_iter([
            ("stream".to_owned(), "tally-prod-eu-likes".into()),
            ("aws_region".to_owned(), "eu-west-1".into()),
            ("table_prefix".to_owned(), "tally-prod-eu".into()),
            (
                "kms_key_arn".to_owned(),
                "arn:aws:kms:eu-west-1:1:key/k".into(),
            ),
        ])),
    )]));
    let two_regions = hcl::Value::Object(hcl::Map::from_iter([
        ("this".to_owned(), "us".into()),
        (
            "homes".to_owned(),
            hcl::Value::Array(vec!["us".into(), "eu".into()]),
        ),
        ("peers".to_owned(), peers),
    ]));
    for regions in [None, Some(two_regions)] {
        let several = regions.is_some();
        let mut given = required_vars();
        given.extend(regions.map(|r| ("regions", r)));
        let mut ctx = eval_context(&bodies, &given);
        list_funcs(&mut ctx);
        let mut locals = ctx_locals(&bodies, &ctx);
        for name in [
            "routes",
            "replicated",
            "replicated_tables",
            "streamed_tables",
        ] {
            ctx.declare_var("local", hcl::Value::Object(locals.clone()));
            let v = local(&bodies, name).evaluate(&ctx).unwrap();
            locals.insert(name.to_owned(), v);
        }
        ctx.declare_var("local", hcl::Value::Object(locals));
        let mut streamed = BTreeSet::new();
        let mut replicated = BTreeSet::new();
        for (suffix, ..) in tally_aws::dynamo::TABLES {
            let each = hcl::Map::from_iter([("key".to_owned(), hcl::Value::from(*suffix))]);
            ctx.declare_var("each", hcl::Value::Object(each));
            let on = attr_expr(table, "stream_enabled").evaluate(&ctx).unwrap();
            let view = attr_expr(table, "stream_view_type").evaluate(&ctx).unwrap();
            match on {
                hcl::Value::Bool(true) => {
                    assert_eq!(view, hcl::Value::from("NEW_AND_OLD_IMAGES"), "{suffix}");
                    streamed.insert(suffix.to_string());
                }
                hcl::Value::Null => assert_eq!(view, hcl::Value::Null, "{suffix}"),
                other => panic!("{suffix}: stream_enabled = {other:?}"),
            }
            match replica_for_each.evaluate(&ctx).unwrap() {
                hcl::Value::Object(o) if o.is_empty() => {}
                hcl::Value::Object(o) => {
                    assert_eq!(o.keys().collect::<Vec<_>>(), ["eu"], "{suffix}");
                    replicated.insert(suffix.to_string());
                }
                other => panic!("{suffix}: replicas {other:?}"),
            }
        }
        assert!(streamed.contains("edges"), "several regions: {several}");
        assert!(
            replicated.is_subset(&streamed),
            "a global table needs its stream: {replicated:?}, {streamed:?}"
        );
        if several {
            assert!(replicated.contains("counts") && replicated.contains("edges"));
            assert_eq!(streamed, replicated);
        } else {
            assert!(replicated.is_empty(), "{replicated:?}");
            assert_eq!(streamed, set(&["edges"]));
        }
    }
}

/// The locals `eval_context` declared, to add to.
fn ctx_locals(bodies: &[Body], ctx: &hcl::eval::Context<'_>) -> hcl::Map<String, hcl::Value> {
    use hcl::eval::Evaluate;
    ["name", "stream_name", "table_prefix", "health_port"]
        .iter()
        .map(|n| ((*n).to_owned(), local(bodies, n).evaluate(ctx).unwrap()))
        .collect()
}

/// The fan-out consumers Terraform registers carry the names tally looks for, so the workers use
/// them instead of registering others; the workers may subscribe only through tally's consumers.
#[test]
fn fan_out_consumers_are_the_ones_tally_uses() {
    use hcl::eval::Evaluate;
    let bodies = terraform();
    let mut given = required_vars();
    given.push(("environment", "staging".into()));
    let mut ctx = eval_context(&bodies, &given);
    let consumer = resource(&bodies, "aws_kinesis_stream_consumer", "app");
    let name = consumer
        .body()
        .attributes()
        .find(|a| a.key() == "name")
        .unwrap()
        .expr()
        .clone();
    for app in [tally_core::apps::COUNTER, tally_core::apps::ANALYTICS] {
        let mut each = hcl::Map::new();
        each.insert("key".to_owned(), hcl::Value::from(app));
        ctx.declare_var("each", hcl::Value::Object(each));
        assert_eq!(
            name.evaluate(&ctx).unwrap(),
            hcl::Value::from(tally_aws::fan_out::consumer_name("tally-staging", app))
        );
    }
    // Registered only for the applications that read by "efo".
    let for_each = attr_text(consumer, "for_each").unwrap();
    assert!(for_each.contains("if mode == \"efo\""), "{for_each}");
    let read_modes = object(&local(&bodies, "read_modes"));
    assert_eq!(
        read_modes.keys().cloned().collect::<BTreeSet<_>>(),
        set(&[tally_core::apps::COUNTER, tally_core::apps::ANALYTICS])
    );
    let iam = text("iam.tf");
    assert!(
        iam.contains(
            "resources = [\"${aws_kinesis_stream.likes.arn}/consumer/${local.table_prefix}-*\"]"
        ),
        "SubscribeToShard only through tally's consumers"
    );
}

fn text(file: &str) -> String {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("terraform");
    // One space between tokens, so that checks do not depend on alignment.
    std::fs::read_to_string(dir.join(file))
        .unwrap()
        .lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
        .collect::<Vec<_>>()
        .join("\n")
}

fn resource<'a>(bodies: &'a [Body], kind: &str, name: &str) -> &'a Block {
    blocks(bodies, "resource")
        .find(|b| b.labels().iter().map(|l| l.as_str()).collect::<Vec<_>>() == [kind, name])
        .unwrap_or_else(|| panic!("resource {kind}.{name}"))
}

fn has_block(b: &Block, name: &str) -> bool {
    b.body().blocks().any(|x| x.identifier() == name)
}

fn attr_text(b: &Block, name: &str) -> Option<String> {
    b.body()
        .attributes()
        .find(|a| a.key() == name)
        .map(|a| hcl::format::to_string(a.expr()).unwrap())
}

/// The expression of a block's attribute, which must be there.
fn attr_expr(b: &Block, name: &str) -> Expression {
    b.body()
        .attributes()
        .find(|a| a.key() == name)
        .unwrap_or_else(|| panic!("{name} expected"))
        .expr()
        .clone()
}

/// Every alarm reaches someone when it fires and when it recovers; the table alarms use metrics
/// DynamoDB publishes per table, and the system-errors sum covers every operation tally calls.
#[test]
fn alarms_can_fire_and_reach_someone() {
    let bodies = terraform();
    let alarms: Vec<&Block> = blocks(&bodies, "resource")
        .filter(|b| b.labels()[0].as_str() == "aws_cloudwatch_metric_alarm")
        .collect();
    assert!(alarms.len() >= 6);
    for a in &alarms {
        let name = a.labels()[1].as_str();
        for k in ["alarm_actions", "ok_actions"] {
            assert!(attr_text(a, k).is_some(), "alarm {name} has no {k}");
        }
    }
    let sub = resource(&bodies, "aws_sns_topic_subscription", "alarm_email");
    assert!(attr_text(sub, "for_each")
        .unwrap()
        .contains("var.alarm_emails"));
    // Per-table metrics only: ThrottledRequests and SystemErrors come per operation.
    let per_table = object(&local(&bodies, "table_alarm_metrics"));
    let metrics: BTreeSet<String> = per_table.values().map(string).collect();
    assert_eq!(metrics, set(&["ReadThrottleEvents", "WriteThrottleEvents"]));
    let errors = resource(
        &bodies,
        "aws_cloudwatch_metric_alarm",
        "table_system_errors",
    );
    assert!(has_block(errors, "metric_query") || has_block(errors, "dynamic"));
    let ops: BTreeSet<String> = match local(&bodies, "dynamodb_operations") {
        Expression::Array(a) => a.iter().map(string).collect(),
        other => panic!("{other:?}"),
    };
    let mut called: BTreeSet<String> = actions_called_in_source()
        .iter()
        .filter_map(|a| a.strip_prefix("dynamodb:"))
        // ConditionCheckItem is only ever a part of a transaction, never a request of its own.
        // DescribeKinesisStreamingDestination is a backfill's one control-plane question.
        // The edges' change log (DynamoDB Streams) is watched by its reader's own alarms, the
        // `changes` application's (`alarms_on_tally_metrics_use_what_the_workers_emit`).
        .filter(|a| {
            ![
                "DescribeTable",
                "ConditionCheckItem",
                "DescribeKinesisStreamingDestination",
            ]
            .contains(a)
                && !DYNAMODB_STREAMS_CALLS
                    .iter()
                    .any(|(_, s)| s.strip_prefix("dynamodb:") == Some(*a))
        })
        .map(str::to_owned)
        .collect();
    // A transaction's parts are one TransactWriteItems request.
    let tx = text("../aws/src/dynamo/mod.rs").contains(".transact_write_items()");
    if tx {
        called.insert("TransactWriteItems".into());
    }
    assert!(
        called.is_subset(&ops),
        "operations tally calls: {called:?}, summed: {ops:?}"
    );
    assert!(
        blocks(&bodies, "resource").any(|b| b.labels()[0].as_str() == "aws_cloudwatch_dashboard")
    );
}

/// State goes to S3 with locking, the provider is pinned to one major version, and nothing that
/// holds state or account details can be committed or copied into the image.
#[test]
fn state_pins_and_ignores() {
    let bodies = terraform();
    let tf = blocks(&bodies, "terraform").collect::<Vec<_>>();
    assert!(
        tf.iter().any(|b| b
            .body()
            .blocks()
            .any(|x| x.identifier() == "backend"
                && x.labels().first().map(|l| l.as_str()) == Some("s3"))),
        "an S3 backend"
    );
    let example = text("backend.hcl.example");
    assert!(example.contains("use_lockfile = true") && example.contains("encrypt = true"));
    let versions = text("versions.tf");
    assert!(
        versions.contains("version = \"6.28.0\""),
        "one release of the provider, pinned"
    );
    // The lock file is committed and pins that release with its published checksums, so that
    // `terraform init` verifies the provider it downloads.
    let lock: Body = hcl::from_str(&text(".terraform.lock.hcl")).unwrap();
    let provider = lock
        .blocks()
        .find(|b| b.identifier() == "provider")
        .expect("a provider in the lock file");
    assert_eq!(
        provider.labels()[0].as_str(),
        "registry.terraform.io/hashicorp/aws"
    );
    assert_eq!(
        attr_text(provider, "version").as_deref(),
        Some("\"6.28.0\"")
    );
    assert_eq!(
        attr_text(provider, "constraints").as_deref(),
        Some("\"6.28.0\"")
    );
    let hashes: Vec<String> = match provider
        .body()
        .attributes()
        .find(|a| a.key() == "hashes")
        .map(|a| a.expr().clone())
    {
        Some(Expression::Array(a)) => a.iter().map(string).collect(),
        other => panic!("hashes: {other:?}"),
    };
    assert!(hashes.len() >= 10, "{hashes:?}");
    for h in &hashes {
        let hex = h
            .strip_prefix("zh:")
            .or_else(|| h.strip_prefix("h1:"))
            .unwrap_or("");
        assert!(!hex.is_empty(), "a hash is zh: or h1:, got {h}");
    }
    assert!(versions.contains("required_version = \">= 1.10.0\""));
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    for (file, entries) in [
        (
            ".gitignore",
            &[
                ".terraform/",
                "*.tfstate",
                "*.tfstate.*",
                "*.tfvars",
                "!*.tfvars.example",
                "backend.hcl",
            ][..],
        ),
        (
            ".dockerignore",
            &[".terraform", "*.tfstate", "*.tfvars"][..],
        ),
    ] {
        let text = std::fs::read_to_string(root.join(file)).unwrap();
        for e in entries {
            assert!(text.lines().any(|l| l.trim() == *e), "{file} lacks {e}");
        }
    }
}

/// The variables an operator could get wrong are checked before anything is planned; the example
/// tfvars sets every variable that has no default, and only declared ones.
#[test]
fn variables_are_validated_and_the_example_is_complete() {
    let bodies = terraform();
    let vars: BTreeMap<String, &Block> = blocks(&bodies, "variable")
        .map(|v| (v.labels()[0].as_str().to_owned(), v))
        .collect();
    for name in [
        "retention_hours",
        "shard_count",
        "counter_tasks",
        "analytics_tasks",
        "subnet_ids",
        "image",
        "environment",
        "stream_mode",
        "stop_timeout_secs",
        "task_size",
    ] {
        assert!(
            has_block(vars[name], "validation"),
            "variable {name} has no validation"
        );
    }
    let cond = |name: &str| {
        vars[name]
            .body()
            .blocks()
            .filter(|b| b.identifier() == "validation")
            .filter_map(|b| attr_text(b, "condition"))
            .collect::<Vec<_>>()
            .join(" ")
    };
    assert!(cond("counter_tasks").contains("var.shard_count"));
    assert!(cond("image").contains("@sha256:"));
    assert!(cond("retention_hours").contains("24") && cond("retention_hours").contains("8760"));
    assert!(cond("subnet_ids").contains(">= 2"));
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("terraform");
    let example: Body =
        hcl::from_str(&std::fs::read_to_string(dir.join("terraform.tfvars.example")).unwrap())
            .unwrap();
    let set_in_example: BTreeSet<String> =
        example.attributes().map(|a| a.key().to_owned()).collect();
    for k in &set_in_example {
        assert!(
            vars.contains_key(k),
            "the example sets {k}, which is no variable"
        );
    }
    for (name, v) in &vars {
        if !v.body().attributes().any(|a| a.key() == "default") {
            assert!(set_in_example.contains(name), "the example lacks {name}");
        }
    }
}

/// Safe rollouts: tasks that fail roll back by themselves, the task count belongs to autoscaling
/// (on the iterator age tally emits, capped at the shard count), the container has a health check
/// on the worker's own endpoint, and data-holding resources cannot be destroyed by accident.
#[test]
fn rollouts_scaling_and_health() {
    let bodies = terraform();
    let svc = resource(&bodies, "aws_ecs_service", "service");
    for b in [
        "deployment_circuit_breaker",
        "alarms",
        "lifecycle",
        "network_configuration",
    ] {
        assert!(has_block(svc, b), "the services have {b}");
    }
    let ecs = text("ecs.tf");
    assert!(ecs.contains("ignore_changes = [desired_count]"));
    assert!(ecs.contains(
        "depends_on = [aws_iam_role_policy.task, aws_iam_role_policy_attachment.execution]"
    ));
    let td = resource(&bodies, "aws_ecs_task_definition", "service");
    assert!(has_block(td, "runtime_platform"));
    assert!(attr_text(td, "task_role_arn")
        .unwrap()
        .contains("aws_iam_role.task[each.key]"));
    // The health check asks the port the worker serves on.
    let port = match local(&bodies, "health_port") {
        Expression::Number(n) => n.to_string(),
        other => panic!("{other:?}"),
    };
    assert!(ecs.contains(
        "\"CMD\", \"/usr/local/bin/tally\", \"probe\", \"http://127.0.0.1:${local.health_port}/healthz\""
    ));
    let dockerfile = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("Dockerfile"),
    )
    .unwrap();
    assert!(
        dockerfile.contains("/usr/local/bin/tally"),
        "the image puts tally where the check runs it"
    );
    let main = text("main.tf");
    assert!(
        main.contains(
            "\"analytics\", \"--log-json\", \"--http\", \"127.0.0.1:${local.health_port}\""
        ),
        "workers serve /healthz"
    );
    // The counter's --http is reachable from the serve tasks only (provisional counts).
    assert!(
        main.contains("\"count\", \"--log-json\", \"--http\", \"0.0.0.0:${local.health_port}\"")
    );
    let serve_tf = text("serve.tf");
    let ingress = resource(&bodies, "aws_security_group_rule", "counter_from_serve");
    assert_eq!(attr_text(ingress, "type").unwrap(), "\"ingress\"");
    assert_eq!(
        attr_text(ingress, "source_security_group_id").unwrap(),
        "aws_security_group.serve.id"
    );
    assert_eq!(
        attr_text(ingress, "from_port").unwrap(),
        "local.health_port"
    );
    assert!(serve_tf.contains("resource \"aws_security_group_rule\" \"serve_to_counter\""));
    assert_eq!(port, "9100");
    // Autoscaling.
    let target = resource(&bodies, "aws_appautoscaling_target", "service");
    assert_eq!(
        attr_text(target, "max_capacity").unwrap(),
        "var.shard_count"
    );
    let scaling = text("autoscaling.tf");
    assert!(scaling.contains("metric_name = \"IteratorAgeMs\""));
    // The counter's tasks scale on the more behind of their two applications.
    assert!(scaling.contains(&format!(
        "k == \"{}\" ? [\"{}\", \"{}\"]",
        tally_core::apps::COUNTER,
        tally_core::apps::COUNTER,
        tally_core::apps::CHANGES
    )));
    assert!(tally_consumer::worker::metric::ALL.contains(&"IteratorAgeMs"));
    for (kind, name) in [("aws_kinesis_stream", "likes"), ("aws_kms_key", "tally")] {
        let r = resource(&bodies, kind, name);
        let lifecycle = r.body().blocks().find(|b| b.identifier() == "lifecycle");
        assert_eq!(
            lifecycle
                .and_then(|l| attr_text(l, "prevent_destroy"))
                .as_deref(),
            Some("true"),
            "{kind}.{name} is protected"
        );
    }
    let outputs: BTreeSet<String> = blocks(&bodies, "output")
        .map(|o| o.labels()[0].as_str().to_owned())
        .collect();
    for o in [
        "cluster_name",
        "service_names",
        "log_groups",
        "task_role_arns",
        "kms_key_arn",
        "operator_policy_arn",
    ] {
        assert!(outputs.contains(o), "output {o}");
    }
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
    // Each of them for every application whose workers report: the services', and the
    // counter's second stage (the edges' change log, kept 24 hours), which runs in the counter's
    // tasks, not as a service of its own. Its stopping rolls a counter deploy back too.
    let Expression::FuncCall(apps) = local(&bodies, "worker_apps") else {
        panic!("worker_apps = concat(keys(local.services), [...])")
    };
    assert_eq!(apps.name.to_string(), "concat");
    assert_eq!(
        hcl::format::to_string(&apps.args[0]).unwrap(),
        "keys(local.services)"
    );
    let more: Vec<String> = match &apps.args[1] {
        Expression::Array(a) => a.iter().map(string).collect(),
        other => panic!("{other:?}"),
    };
    assert_eq!(more, [tally_core::apps::CHANGES]);
    assert!(text("alarms.tf").contains("setproduct(local.worker_apps, keys(local.app_alarms))"));
    let ecs = text("ecs.tf");
    assert!(
        ecs.contains("each.key == \"counter\" ? [\"changes\"] : []"),
        "the counter's deploy alarms"
    );
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

/// The read side is deployed: `tally serve` as its own ECS service behind an internal load
/// balancer that health-checks `/healthz`, reachable from the load balancer only, scaled on
/// requests per task, its address an output.
#[test]
fn the_read_side_is_deployed_behind_an_internal_load_balancer() {
    let bodies = terraform();
    let lb = resource(&bodies, "aws_lb", "serve");
    assert_eq!(attr_text(lb, "internal").as_deref(), Some("true"));
    assert_eq!(
        attr_text(lb, "drop_invalid_header_fields").as_deref(),
        Some("true")
    );
    let tg = resource(&bodies, "aws_lb_target_group", "serve");
    let hc = tg
        .body()
        .blocks()
        .find(|b| b.identifier() == "health_check")
        .unwrap();
    assert_eq!(attr_text(hc, "path").as_deref(), Some("\"/healthz\""));
    assert_eq!(attr_text(tg, "target_type").as_deref(), Some("\"ip\""));
    let svc = resource(&bodies, "aws_ecs_service", "serve");
    for b in [
        "load_balancer",
        "network_configuration",
        "deployment_circuit_breaker",
    ] {
        assert!(has_block(svc, b), "the serve service has {b}");
    }
    let td = resource(&bodies, "aws_ecs_task_definition", "serve");
    assert!(attr_text(td, "task_role_arn")
        .unwrap()
        .contains("aws_iam_role.serve"));
    let serve_tf = text("serve.tf");
    assert!(serve_tf
        .contains("[\"serve\", \"--log-json\", \"--addr\", \"0.0.0.0:${local.serve_port}\"]"));
    assert!(serve_tf.contains("\"probe\", \"http://127.0.0.1:${local.serve_port}/healthz\""));
    // The tasks admit the load balancer only; the load balancer the readers' networks only.
    let tasks_sg = resource(&bodies, "aws_security_group", "serve");
    let ingress: Vec<&Block> = tasks_sg
        .body()
        .blocks()
        .filter(|b| b.identifier() == "ingress")
        .collect();
    assert_eq!(ingress.len(), 1);
    assert!(attr_text(ingress[0], "cidr_blocks").is_none());
    assert!(attr_text(ingress[0], "security_groups")
        .unwrap()
        .contains("aws_security_group.serve_lb.id"));
    let lb_sg = resource(&bodies, "aws_security_group", "serve_lb");
    let lb_in = lb_sg
        .body()
        .blocks()
        .find(|b| b.identifier() == "ingress")
        .unwrap();
    assert_eq!(
        attr_text(lb_in, "cidr_blocks").as_deref(),
        Some("var.serve_allowed_cidrs")
    );
    assert!(serve_tf.contains("predefined_metric_type = \"ALBRequestCountPerTarget\""));
    let outputs: BTreeSet<String> = blocks(&bodies, "output")
        .map(|o| o.labels()[0].as_str().to_owned())
        .collect();
    assert!(outputs.contains("serve_url"));
    // Who may read: a generated token in Secrets Manager (the AWS provider's own generator),
    // encrypted with tally's key, handed to the container by ECS and read by the flag tally
    // has; the execution role may fetch only that secret; apps find it by an output.
    assert!(outputs.contains("serve_token_secret_arn"));
    assert!(serve_tf.contains("data \"aws_secretsmanager_random_password\" \"serve_token\""));
    let secret = resource(&bodies, "aws_secretsmanager_secret", "serve_token");
    assert_eq!(
        attr_text(secret, "kms_key_id").as_deref(),
        Some("aws_kms_key.tally.arn")
    );
    let version = resource(&bodies, "aws_secretsmanager_secret_version", "serve_token");
    assert!(
        has_block(version, "lifecycle"),
        "a new token only on purpose"
    );
    let env = match local(&bodies, "serve_token_env") {
        Expression::String(s) => s,
        other => panic!("{other:?}"),
    };
    assert!(serve_tf.contains("[\"--auth-token-env\", local.serve_token_env]"));
    assert!(serve_tf.contains("valueFrom = s.arn"));
    assert!(
        env.starts_with("TALLY_") && !env.contains("__"),
        "{env}: not a setting"
    );
    let help = crate::common::output({
        let mut c = std::process::Command::new(crate::common::tally_bin());
        c.args(["serve", "--help"]);
        c
    });
    assert!(String::from_utf8_lossy(&help.stdout).contains("--auth-token-env"));
    assert_eq!(
        policy_actions(&bodies, "execution_secrets"),
        set(&["secretsmanager:GetSecretValue", "kms:Decrypt"])
    );
    // The port the container serves on is the target group's and the health check's.
    let port = match local(&bodies, "serve_port") {
        Expression::Number(n) => n.to_string(),
        other => panic!("{other:?}"),
    };
    assert_eq!(port, "8080");
}

/// terraform/README names every `.tf` file and every output, as docs/CONFIGURATION.md's
/// sample is held against `tally config`: a file or output added without a word fails here.
#[test]
fn the_terraform_readme_names_every_file_and_output() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("terraform");
    let readme = std::fs::read_to_string(dir.join("README.md")).unwrap();
    let mut files: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|f| f.ends_with(".tf"))
        .collect();
    files.sort();
    assert!(files.len() >= 10, "{files:?}");
    for f in &files {
        assert!(
            readme.contains(&format!("`{f}`")),
            "terraform/README does not name {f}"
        );
    }
    let bodies = terraform();
    for o in blocks(&bodies, "output") {
        let name = o.labels()[0].as_str();
        assert!(
            readme.contains(&format!("`{name}`")),
            "terraform/README does not name the output {name}"
        );
    }
}

/// The source table's item mapping defaults to tally's own `[input]` defaults, key by key, so that
/// a deploy that sets only `source_table_name` reads what `tally config` says it reads.
#[test]
fn the_source_items_default_to_tally_s_input_defaults() {
    let bodies = terraform();
    let var = blocks(&bodies, "variable")
        .find(|b| b.labels().first().map(|l| l.as_str()) == Some("source_items"))
        .expect("variable source_items");
    let default = attr_expr(var, "default");
    let tf: BTreeMap<String, String> = object(&default)
        .iter()
        .map(|(k, v)| (k.clone(), string(v)))
        .collect();
    // The type's `optional(string, "…")` defaults (a partial object given) are the same.
    let ty = attr_expr(var, "type");
    let Expression::FuncCall(object_type) = ty else {
        panic!("object(...) expected")
    };
    let optional: BTreeMap<String, String> = object(&object_type.args[0])
        .iter()
        .map(|(k, v)| match v {
            Expression::FuncCall(f) => (k.clone(), string(&f.args[1])),
            other => panic!("optional(string, default) expected for {k}: {other:?}"),
        })
        .collect();
    assert_eq!(optional, tf);
    let code = serde_json::to_value(tally_core::input::InputConfig::default()).unwrap();
    let code: BTreeMap<String, String> = code
        .as_object()
        .unwrap()
        .iter()
        .filter(|(k, _)| !["format", "time_precision"].contains(&k.as_str()))
        .map(|(k, v)| (k.clone(), v.as_str().unwrap().to_owned()))
        .collect();
    assert_eq!(tf, code);
}
