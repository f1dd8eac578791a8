use super::*;

fn no_env() -> Vec<(String, String)> {
    Vec::new()
}

fn problems(text: &str) -> Vec<ConfigProblem> {
    match Config::from_toml_with_env(text, no_env()) {
        Ok(_) => Vec::new(),
        Err(e) => e.problems,
    }
}

#[test]
fn the_shipped_example_config_is_valid() {
    let text = include_str!("../../config/floodgate.toml");
    let config = Config::from_toml_with_env(text, no_env()).expect("example config parses");
    assert!(!config.tenants.is_empty());
}

#[test]
fn unknown_keys_are_errors_that_name_the_key() {
    let p = problems("[server]\nlisten = \"127.0.0.1:1\"\nlisen = \"x\"\n");
    assert_eq!(p.len(), 1);
    assert_eq!(p[0].key, "server.lisen");
    assert!(
        p[0].message.contains("unknown field `lisen`"),
        "{}",
        p[0].message
    );
}

#[test]
fn wrong_types_name_the_key_path() {
    let p = problems("[buffer]\nmax_bytes = \"lots\"\n");
    assert_eq!(p[0].key, "buffer.max_bytes");
}

#[test]
fn semantic_problems_are_all_reported() {
    let text = r#"
[server]
listen = "127.0.0.1:8080"
admin_listen = "127.0.0.1:8080"
[buffer]
max_bytes = 0
[[tenants]]
id = "a"
topics = []
records_burst = 5
max_buffer_share = 1.5
"#;
    let keys: Vec<String> = problems(text).into_iter().map(|p| p.key).collect();
    assert_eq!(
        keys,
        vec![
            "server.admin_listen",
            "buffer.max_bytes",
            "tenants[0].topics",
            "tenants[0].records_burst",
            "tenants[0].max_buffer_share",
        ]
    );
}

#[test]
fn environment_overrides_sections_and_librdkafka_properties() {
    let env = vec![
        (
            "FLOODGATE__SERVER__MAX_BODY_BYTES".to_string(),
            "1234".to_string(),
        ),
        (
            "FLOODGATE__KAFKA__PRODUCER__LINGER_MS".to_string(),
            "20".to_string(),
        ),
        (
            "FLOODGATE__KAFKA__BOOTSTRAP_SERVERS".to_string(),
            "k1:9092,k2:9092".to_string(),
        ),
        ("UNRELATED".to_string(), "x".to_string()),
    ];
    let c = Config::from_toml_with_env("", env).expect("valid");
    assert_eq!(c.server.max_body_bytes, 1234);
    // librdkafka receives every property as text: "20" either way.
    assert_eq!(
        c.kafka.producer.get("linger.ms").map(ToString::to_string),
        Some("20".to_string())
    );
    assert_eq!(c.kafka.bootstrap_servers, "k1:9092,k2:9092");
}

#[test]
fn values_that_would_break_the_runtime_are_refused() {
    let keys: Vec<String> = problems(
        "[server]\nmax_connections = 99999999999\n[global]\nrecords_per_sec = 99999999999\n",
    )
    .into_iter()
    .map(|p| p.key)
    .collect();
    assert_eq!(
        keys,
        vec!["server.max_connections", "global.records_per_sec"]
    );
}

#[test]
fn burst_defaults_to_one_second_of_rate() {
    let c = Config::from_toml_with_env(
        "[[tenants]]\nid = \"a\"\ntopics = [\"*\"]\nrecords_per_sec = 50\n",
        no_env(),
    )
    .expect("valid");
    let spec = c.tenants[0].spec().expect("valid");
    assert_eq!(spec.records.map(|r| r.burst), Some(50));
    assert_eq!(spec.bytes, None);
}

#[test]
fn an_alias_of_a_reserved_librdkafka_property_is_an_error() {
    let p = problems("[kafka.producer]\n\"delivery.timeout.ms\" = 120000\n");
    assert_eq!(p.len(), 1, "{p:?}");
    assert_eq!(p[0].key, "kafka.producer.delivery.timeout.ms");
    assert!(
        p[0].message.contains("message.timeout.ms"),
        "{}",
        p[0].message
    );
}

#[test]
fn producer_secrets_are_never_printed() {
    let text = "[kafka.producer]\n\"sasl.password\" = \"hunter2-secret\"\n\"linger.ms\" = 7\n";
    let config = Config::from_toml_with_env(text, no_env()).expect("valid");
    let debug = format!("{config:?}");
    assert!(!debug.contains("hunter2"), "{debug}");
    assert!(
        debug.contains("<redacted>") && debug.contains("linger.ms"),
        "{debug}"
    );
}

#[test]
fn environment_overrides_keep_strings_as_written() {
    for tricky in ["0x1F", "1_000", "1e3", "inf", "true", "007"] {
        let env = vec![
            (
                "FLOODGATE__KAFKA__PRODUCER__SASL_PASSWORD".to_string(),
                tricky.to_string(),
            ),
            (
                "FLOODGATE__ADMIN__TOKEN_ENV".to_string(),
                tricky.to_string(),
            ),
            (
                "FLOODGATE__BUFFER__MAX_RECORDS".to_string(),
                "1_000".to_string(),
            ),
        ];
        let c = Config::from_toml_with_env("", env).expect("valid");
        assert_eq!(
            c.kafka.producer.get("sasl.password"),
            Some(&PropertyValue::Text(tricky.to_string())),
            "{tricky}"
        );
        assert_eq!(c.admin.token_env, tricky);
        // Numeric fields still take numbers written as TOML would.
        assert_eq!(c.buffer.max_records, 1000);
    }
}

#[test]
fn one_key_cannot_belong_to_two_tenants() {
    let digest = "ab".repeat(32);
    let text = format!(
        "[[tenants]]\nid = \"a\"\ntopics = [\"x\"]\napi_key_sha256 = [\"{digest}\"]\n\
         [[tenants]]\nid = \"b\"\ntopics = [\"y\"]\napi_key_sha256 = [\"{digest}\"]\n"
    );
    let p = problems(&text);
    assert_eq!(p.len(), 1, "{p:?}");
    assert_eq!(p[0].key, "tenants[1].api_key_sha256[0]");
    assert!(
        p[0].message.contains("already belongs to tenant \"a\""),
        "{}",
        p[0].message
    );
}

#[test]
fn lag_guards_are_validated_naming_the_guard_and_field() {
    let good = "[[lag_guards]]\nname = \"orders\"\ntopics = [\"orders.*\"]\ngroup = \"g\"\nmax_recovery_s = 300\n";
    let config = Config::from_toml_with_env(good, no_env()).expect("a minimal guard is valid");
    let g = &config.lag_guards[0];
    assert_eq!(
        (g.headroom, g.interval_ms, g.floor_records_per_sec),
        (1.2, 1000, 0)
    );
    let p = problems(&format!(
        "{good}headroom = 0.5\ninterval_ms = 0\nrelease_fraction = 1.5\n\
         [[lag_guards]]\nname = \"orders\"\ntopics = [\"[\"]\ngroup = \"\"\nmax_recovery_s = -1\n"
    ));
    let keys: Vec<&str> = p.iter().map(|p| p.key.as_str()).collect();
    for key in [
        "lag_guards[0].headroom",
        "lag_guards[0].interval_ms",
        "lag_guards[0].release_fraction",
        "lag_guards[1].topics[0]",
        "lag_guards[1].group",
        "lag_guards[1].max_recovery_s",
        "lag_guards[1].name",
    ] {
        assert!(keys.contains(&key), "{key} missing from {keys:?}");
    }
    let missing = problems("[[lag_guards]]\nname = \"x\"\ntopics = [\"t\"]\nmax_recovery_s = 1\n");
    assert!(
        missing.iter().any(|p| p.message.contains("group")),
        "{missing:?}"
    );
}

#[test]
fn tenant_fields_are_named_by_their_index_and_the_environment_sets_no_tenant() {
    let text = "[[tenants]]\nid = \"a\"\ntopics = [\"x\"]\n\
                [[tenants]]\nid = \"b\"\ntopics = [\"y\"]\nrecords_per_sec = \"fast\"\n";
    let p = problems(text);
    assert_eq!(p[0].key, "tenants[1].records_per_sec", "{p:?}");
    let p = problems("[[tenants]]\nid = \"a\"\ntopics = [\"x\"]\nrate = 1\n");
    assert_eq!(p[0].key, "tenants[0].rate", "{p:?}");
    assert!(p[0].message.contains("unknown field `rate`"), "{p:?}");
    let env = vec![("FLOODGATE__TENANTS__ID".to_string(), "x".to_string())];
    let refused = Config::from_toml_with_env(text, env).expect_err("refused");
    assert_eq!(refused.problems[0].key, "FLOODGATE__TENANTS__ID");
    let c = Config::from_toml_with_env("[[tenants]]\nid = \"a\"\ntopics = [\"x\"]\n", no_env())
        .expect("valid");
    assert_eq!(c.tenants[0].id, "a");
}

/// A file cut at its `[[tenants]]` headers reads as the whole document does, whatever sits
/// between the tenants; odd layouts are read whole and give TOML's own answer.
#[test]
fn a_file_read_a_tenant_at_a_time_reads_as_the_whole_document() {
    let digest = |c: char| c.to_string().repeat(64);
    let plain = format!(
        "[server]\nlisten = \"127.0.0.1:1\"\n\
         [[tenants]]\nid = \"a\"\ntopics = [\"x\", \"y.*\"]\napi_key_sha256 = [\"{}\"]\n# note\n\
         [buffer]\nmax_records = 77\n\
         [[tenants]]\nid = \"b\"  # trailing\ntopics = [\n  \"z\",\n]\nrecords_per_sec = 5\n\
         [[lag_guards]]\nname = \"g\"\ntopics = [\"x\"]\ngroup = \"g\"\nmax_recovery_s = 9\n\
         [[ tenants ]]\nid = \"c\"\ntopics = [\"q\"]\n",
        digest('a')
    );
    let odd = [
        // A header inside a multi-line string is text, not a header.
        "[server]\nlisten = \"127.0.0.1:1\"\n[[tenants]]\nid = \"a\"\ntopics = [\"x\"]\n\
         [kafka]\nclient_id = \"\"\"\n[[tenants]]\nid = \"\"\"\n"
            .to_string(),
        // Quoted and inline forms.
        "[[\"tenants\"]]\nid = \"a\"\ntopics = [\"x\"]\n[[tenants]]\nid = \"b\"\ntopics = [\"y\"]\n"
            .to_string(),
        "tenants = [{ id = \"a\", topics = [\"x\"] }]\n".to_string(),
        "tenants = [{ id = \"a\", topics = [\"x\"] }]\n[[tenants]]\nid = \"b\"\ntopics = [\"y\"]\n"
            .to_string(),
        "[[tenants]]\nid = \"a\"\ntopics = [\"x\"]\n[tenants.extra]\nx = 1\n".to_string(),
        "[[tenants]]\nid = \"a\"\ntopics = [\"x\"]\nrecords_per_sec = \"fast\"\n".to_string(),
        "[[tenants]]\nid = \"a\"\ntopics = [\"x\"\n".to_string(),
    ];
    let cut = super::split::split(&plain).expect("a plain layout is cut");
    assert_eq!(cut.tenants.len(), 3);
    for text in std::iter::once(&plain).chain(odd.iter()) {
        let whole = Config::read_whole(text, &[]).and_then(|c| {
            let p = c.validate();
            if p.is_empty() {
                Ok(c)
            } else {
                Err(ConfigError { problems: p })
            }
        });
        let read = Config::from_toml_with_env(text, no_env());
        match (whole, read) {
            (Ok(a), Ok(b)) => assert_eq!(
                serde_json::to_value(&a).expect("json"),
                serde_json::to_value(&b).expect("json"),
                "{text}"
            ),
            (Err(a), Err(b)) => assert_eq!(format!("{a:?}"), format!("{b:?}"), "{text}"),
            (a, b) => panic!("{text}: whole {a:?}, cut {b:?}"),
        }
    }
    let config = Config::from_toml_with_env(&plain, no_env()).expect("valid");
    let ids: Vec<&str> = config.tenants.iter().map(|t| t.id.as_str()).collect();
    assert_eq!(ids, ["a", "b", "c"]);
    assert_eq!(config.buffer.max_records, 77);
    assert_eq!(config.lag_guards.len(), 1);
}

#[test]
fn the_forwarded_header_is_one_of_two_and_defaults_to_x_forwarded_for() {
    use crate::forwarded::ForwardedHeader;
    let config = Config::from_toml_with_env("", no_env()).expect("defaults");
    assert_eq!(
        config.server.forwarded_header,
        ForwardedHeader::XForwardedFor
    );
    let config =
        Config::from_toml_with_env("[server]\nforwarded_header = \"forwarded\"\n", no_env())
            .expect("forwarded");
    assert_eq!(config.server.forwarded_header, ForwardedHeader::Forwarded);
    let p = problems("[server]\nforwarded_header = \"x-real-ip\"\n");
    assert_eq!(p.len(), 1);
    assert_eq!(p[0].key, "server.forwarded_header");
}

#[test]
fn trusting_every_address_is_warned_about_not_refused() {
    let text = "[server]\ntrusted_proxies = [\"10.0.0.0/8\", \"0.0.0.0/0\", \"::/0\"]\n";
    let config = Config::from_toml_with_env(text, no_env()).expect("valid");
    let warned: Vec<String> = config.warnings().into_iter().map(|w| w.key).collect();
    assert_eq!(
        warned,
        vec!["server.trusted_proxies[1]", "server.trusted_proxies[2]"]
    );
    let quiet =
        Config::from_toml_with_env("[server]\ntrusted_proxies = [\"10.0.0.0/8\"]\n", no_env())
            .expect("valid");
    assert!(quiet.warnings().is_empty());
}

#[test]
fn a_bytes_burst_smaller_than_one_records_overhead_is_refused_naming_the_field() {
    let keys = |text: &str| -> Vec<String> { problems(text).into_iter().map(|p| p.key).collect() };
    let tenant = |budget: &str| {
        format!("[[tenants]]\nid = \"a\"\ntopics = [\"a.*\"]\napi_key_sha256 = []\n{budget}\n")
    };
    assert_eq!(
        keys(&tenant("bytes_per_sec = 100\nbytes_burst = 7")),
        vec!["tenants[0].bytes_burst"]
    );
    // Unset, the burst is the rate: the same.
    let p = problems(&tenant("bytes_per_sec = 5"));
    assert_eq!(p.len(), 1, "{p:?}");
    assert_eq!(p[0].key, "tenants[0].bytes_burst");
    assert!(
        p[0].message.contains("unset, it is bytes_per_sec"),
        "{}",
        p[0].message
    );
    assert!(keys(&tenant("bytes_per_sec = 100\nbytes_burst = 8")).is_empty());
    // The global budget too; a records burst of 1 is fine (it is counted in records).
    assert_eq!(
        keys("[global]\nbytes_per_sec = 1000\nbytes_burst = 4\n"),
        vec!["global.bytes_burst"]
    );
    assert!(keys(&tenant("records_per_sec = 1\nrecords_burst = 1")).is_empty());
}

#[test]
fn auth_problems_name_the_issuer_and_field() {
    let text = r#"
[server]
tls_client_ca_file = "/etc/floodgate/mesh-ca.pem"
[auth]
jwks_max_bytes = 10
[auth.client_cert]
name = "cn"
map = { "" = "acme" }
[[auth.jwt]]
issuer = "https://idp.example.com"
audiences = []
jwks_url = "http://idp.example.com/jwks"
algorithms = ["RS256", "HS256", "none", "RS256"]
min_refetch_s = 0
[[auth.jwt]]
issuer = "https://idp.example.com"
audiences = ["floodgate"]
jwks_url = "https://idp.example.com/jwks"
jwks_file = "/etc/jwks.json"
map = { "orders-svc" = "no spaces allowed" }
[[tenants]]
id = "acme"
topics = ["*"]
jwt_claims = [{ issuer = "https://elsewhere", value = "x" }]
cert_names = ["a", "a"]
"#;
    let keys: Vec<String> = problems(text).into_iter().map(|p| p.key).collect();
    assert_eq!(
        keys,
        vec![
            "server.tls_client_ca_file",
            "auth.jwks_max_bytes",
            "auth.jwt[0].audiences",
            "auth.jwt[0].jwks_url",
            "auth.jwt[0].algorithms[1]",
            "auth.jwt[0].algorithms[2]",
            "auth.jwt[0].algorithms[3]",
            "auth.jwt[0].min_refetch_s",
            "auth.jwt[1].issuer",
            "auth.jwt[1].jwks_url",
            "auth.jwt[1].map.\"orders-svc\"",
            "auth.client_cert.map.\"\"",
            "tenants[0].cert_names[1]",
            "tenants[0].jwt_claims[0].issuer",
        ]
    );
    // A valid section is accepted, loopback http included.
    let ok = r#"
[[auth.jwt]]
issuer = "https://idp.example.com"
audiences = ["floodgate"]
jwks_url = "http://127.0.0.1:8081/jwks"
tenant_claim = "azp"
map = { "orders-svc" = "acme" }
"#;
    assert_eq!(problems(ok), vec![]);
}

#[test]
fn the_idempotency_store_must_hold_the_largest_answer_a_request_may_have() {
    let p = problems("[idempotency]\nmax_bytes = 1048576\n");
    assert_eq!(p.len(), 1, "{p:?}");
    assert_eq!(p[0].key, "idempotency.max_bytes");
    assert!(
        p[0].message.contains("max_records_per_request = 10000"),
        "{}",
        p[0].message
    );
    let p =
        problems("[idempotency]\nmax_bytes = 1048576\n[limits]\nmax_records_per_request = 5000\n");
    assert!(p.is_empty(), "{p:?}");
}

#[test]
fn internal_topics_are_topic_patterns_and_a_required_certificate_needs_a_ca() {
    let keys = |text: &str| -> Vec<String> { problems(text).into_iter().map(|p| p.key).collect() };
    assert_eq!(
        keys("[kafka]\ninternal_topics = [\"_schemas\", \"not a topic!\", \"connect-*\", \"\"]\n"),
        vec!["kafka.internal_topics[1]", "kafka.internal_topics[3]"]
    );
    assert_eq!(
        keys("[server]\nrequire_client_cert = true\n"),
        vec!["server.require_client_cert"]
    );
    let tls = "[server]\ntls_cert_file = \"/c.pem\"\ntls_key_file = \"/k.pem\"\n";
    assert_eq!(
        keys(&format!("{tls}require_client_cert = true\n")),
        vec!["server.require_client_cert"]
    );
    // Unset (the default) or false without a CA, or true with one: fine.
    assert!(keys(tls).is_empty());
    assert!(keys(&format!("{tls}require_client_cert = false\n")).is_empty());
    assert!(keys(&format!(
        "{tls}require_client_cert = true\ntls_client_ca_file = \"/ca.pem\"\n"
    ))
    .is_empty());
}

#[test]
fn quotas_are_refused_where_replicas_would_each_count_them() {
    let tenant = "[[tenants]]\nid = \"a\"\ntopics = [\"x\"]\n\
                  quotas = [{ window = \"day\", records = 10 }]\n";
    assert!(problems(tenant).is_empty(), "a single replica counts them");
    let redis = "[cluster]\nredis_url = \"redis://127.0.0.1:6379\"\n";
    let shared = "[cluster]\nshared_registry = true\nregistry_secret_env = \"S\"\n";
    assert!(
        problems(&format!("{redis}{tenant}")).is_empty(),
        "replicas count them together in Redis"
    );
    assert!(
        problems(&format!(
            "{shared}redis_url = \"redis://127.0.0.1:6379\"\n{tenant}"
        ))
        .is_empty(),
        "a shared registry with Redis counts them together too"
    );
    let p = problems(&format!("{shared}{tenant}"));
    let keys: Vec<&str> = p.iter().map(|p| p.key.as_str()).collect();
    assert_eq!(keys, ["tenants[0].quotas"], "{p:?}");
    assert!(p[0].message.contains("redis_url"), "{}", p[0].message);
    // With Redis the counts live there: a state file would never be read.
    let p = problems(&format!(
        "{redis}[quotas]\nstate_file = \"/tmp/q.json\"\n{tenant}"
    ));
    let keys: Vec<&str> = p.iter().map(|p| p.key.as_str()).collect();
    assert_eq!(keys, ["quotas.state_file"], "{p:?}");
    // The global quotas alike; a bad one is named where it is written.
    let global = "[global]\nquotas = [{ window = \"month\", bytes = 1000 }]\n";
    assert!(problems(global).is_empty(), "{:?}", problems(global));
    assert!(problems(&format!("{redis}{global}")).is_empty());
    let p = problems(&format!("{global}{shared}"));
    let keys: Vec<&str> = p.iter().map(|p| p.key.as_str()).collect();
    assert_eq!(keys, ["global.quotas"], "{p:?}");
    let twice = "[global]\nquotas = [{ window = \"day\", records = 1 }, \
                 { window = \"day\", bytes = 1000 }]\n";
    let p = problems(twice);
    assert!(
        p.iter().any(|p| p.key.starts_with("global.quotas")),
        "{p:?}"
    );
}
