//! Starts an in-process gateway on 127.0.0.1:0 from YAML text.

use mcpmux::{Config, Gateway, Lookup};

use super::{exe, fixture_exe, within};

/// A gateway under test. Call [`TestGateway::stop`] at the end; if a test
/// panics first, dropping the runtime kills the upstream children.
pub struct TestGateway {
    gateway: Option<Gateway>,
    pub url: String,
}

/// YAML for an upstream running the product's demo server
/// (`mcpmux example-server`) with `args`.
pub fn example_upstream(name: &str, args: &[&str]) -> String {
    upstream(name, exe(), &["example-server"], args)
}

/// YAML for an upstream running the test fixture (`mcpmux-fixture`): the
/// demo server plus the test knobs and controls in `args` (`--record`,
/// `--test-controls`, ...), or the conformance fixture (`--conformance`).
pub fn fixture_upstream(name: &str, args: &[&str]) -> String {
    upstream(name, fixture_exe(), &[], args)
}

fn upstream(name: &str, command: &str, first: &[&str], args: &[&str]) -> String {
    let mut all: Vec<&str> = first.to_vec();
    all.extend(["--name", name]);
    all.extend(args);
    let args = serde_json::to_string(&all).unwrap();
    format!(
        "  {name}:\n    command: {}\n    args: {args}\n",
        serde_json::to_string(command).unwrap()
    )
}

impl TestGateway {
    /// Starts a gateway from config text and waits until every upstream is ready.
    pub async fn start(yaml: &str) -> TestGateway {
        let gw = Self::start_unready(yaml).await;
        within("upstreams to become ready", gw.gateway().ready()).await;
        gw
    }

    /// Starts a gateway without waiting for its upstreams.
    pub async fn start_unready(yaml: &str) -> TestGateway {
        let yaml = with_auth_off(yaml);
        let config = Config::parse(&yaml, "test.yaml", &Lookup::from_process())
            .unwrap_or_else(|e| panic!("test config is invalid: {e}\n{yaml}"));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let gateway = Gateway::start(config, listener).unwrap();
        let url = format!("http://{}/mcp", gateway.addr());
        TestGateway {
            gateway: Some(gateway),
            url,
        }
    }

    /// Starts a gateway whose upstreams are demo servers `(name, args)`.
    pub async fn with_examples(extra: &str, upstreams: &[(&str, &[&str])]) -> TestGateway {
        Self::with_upstreams(extra, upstreams, example_upstream).await
    }

    /// Starts a gateway whose upstreams are test fixtures `(name, args)`.
    pub async fn with_fixtures(extra: &str, upstreams: &[(&str, &[&str])]) -> TestGateway {
        Self::with_upstreams(extra, upstreams, fixture_upstream).await
    }

    async fn with_upstreams(
        extra: &str,
        upstreams: &[(&str, &[&str])],
        yaml_for: fn(&str, &[&str]) -> String,
    ) -> TestGateway {
        let mut yaml = format!("{extra}\nupstreams:\n");
        for (name, args) in upstreams {
            yaml.push_str(&yaml_for(name, args));
        }
        Self::start(&yaml).await
    }

    /// Waits until upstream `name` is ready.
    pub async fn wait_ready(&self, name: &str) {
        let mut state = self.gateway().upstream(name).unwrap().watch_state();
        let ready = state.wait_for(|s| *s == mcpmux::UpstreamState::Ready);
        within(name, ready).await.unwrap();
    }

    pub fn gateway(&self) -> &Gateway {
        self.gateway.as_ref().unwrap()
    }

    /// Graceful shutdown, bounded by the test deadline.
    pub async fn stop(mut self) {
        if let Some(gateway) = self.gateway.take() {
            within("gateway shutdown", gateway.shutdown()).await;
        }
    }
}

/// `yaml` with `auth: { mode: off }` appended (so line numbers stay) when
/// it says nothing of auth: most tests are about something else.
pub fn with_auth_off(yaml: &str) -> String {
    if yaml.lines().any(|l| l.starts_with("auth:")) {
        yaml.to_owned()
    } else {
        format!("{yaml}\nauth: {{ mode: off }}\n")
    }
}
