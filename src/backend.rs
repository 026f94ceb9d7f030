//! The one place that picks the adapters behind the ports.

use std::sync::Arc;

use anyhow::{Context, Result};
use tally_core::ports::{
    AnalyticsStore, BaselineWriters, CounterStore, LeaseStore, PortError, Stream,
};

use crate::settings::{BackendKind, ReadMode, Settings};

/// The ports, wired to one backend.
#[derive(Clone)]
pub struct Backend {
    pub stream: Arc<dyn Stream>,
    pub counter: Arc<dyn CounterStore>,
    pub analytics: Arc<dyn AnalyticsStore>,
    pub leases: Arc<dyn LeaseStore>,
    /// The patterns tally is measured against (`demo --baselines`).
    pub baselines: Arc<dyn BaselineWriters>,
    /// The Kinesis stream itself, on AWS (enhanced fan-out registers consumers on it).
    kinesis: Option<tally_aws::KinesisStream>,
}

impl Backend {
    /// Opens the configured backend; an embedded store is created if missing.
    pub async fn open(s: &Settings) -> Result<Backend> {
        match s.backend {
            BackendKind::Embedded => {
                let e =
                    tally_embedded::Embedded::open(&s.data_dir, s.shards).with_context(|| {
                        format!("opening the embedded store in {}", s.data_dir.display())
                    })?;
                Ok(Backend::embedded(e))
            }
            BackendKind::Aws => Backend::aws(s).await,
        }
    }

    /// Opens the configured backend to read it: nothing is created (a missing embedded store is
    /// an error naming its path), and a read-only store can be read.
    pub async fn open_existing(s: &Settings) -> Result<Backend> {
        match s.backend {
            BackendKind::Embedded => Ok(Backend::embedded(
                tally_embedded::Embedded::open_existing(&s.data_dir)?,
            )),
            BackendKind::Aws => Backend::aws(s).await,
        }
    }

    fn embedded(e: tally_embedded::Embedded) -> Backend {
        Backend {
            stream: Arc::new(e.clone()),
            counter: Arc::new(e.clone()),
            analytics: Arc::new(e.clone()),
            leases: Arc::new(e.clone()),
            baselines: Arc::new(e),
            kinesis: None,
        }
    }

    async fn aws(s: &Settings) -> Result<Backend> {
        let aws = tally_aws::Aws::connect(&aws_settings(s)).await?;
        Ok(Backend {
            stream: Arc::new(aws.stream.clone()),
            counter: Arc::new(aws.tables.clone()),
            analytics: Arc::new(aws.tables.clone()),
            leases: Arc::new(aws.tables.clone()),
            baselines: Arc::new(aws.tables),
            kinesis: Some(aws.stream),
        })
    }

    /// The stream as `app` reads it: polled, or through its enhanced fan-out consumer when
    /// `read_mode = "efo"` on Kinesis. When the account or the stream refuses fan-out (no
    /// permission, the consumer limit reached, a peer without it), the app reads by polling and
    /// says so in one log line; an endpoint that does not answer is an error as for any call.
    pub async fn stream_for(&self, s: &Settings, app: &str) -> Result<Arc<dyn Stream>> {
        if s.read_mode(app) == ReadMode::Polling {
            return Ok(self.stream.clone());
        }
        let Some(kinesis) = &self.kinesis else {
            tracing::info!(
                app,
                "read_mode = \"efo\" is for Kinesis; the embedded stream is read directly"
            );
            return Ok(self.stream.clone());
        };
        let name = s.consumer_name(app);
        let wait = Settings::ms(s.lease.idle_poll_ms);
        match tally_aws::fan_out::FanOut::register(kinesis, &name, wait).await {
            Ok(f) => Ok(Arc::new(f)),
            Err(e @ (PortError::Unavailable { .. } | PortError::Timeout(_))) => {
                Err(anyhow::Error::new(e).context(format!("registering consumer {name}")))
            }
            Err(e) => {
                tracing::warn!(
                    app,
                    consumer = %name,
                    "enhanced fan-out is not available ({e}); reading stream {} by polling GetRecords instead",
                    s.stream
                );
                Ok(self.stream.clone())
            }
        }
    }
}

/// The AWS adapter's settings from ours.
pub fn aws_settings(s: &Settings) -> tally_aws::AwsSettings {
    let opt = |u: &str| (!u.is_empty()).then(|| u.to_owned());
    tally_aws::AwsSettings {
        stream: s.stream.clone(),
        table_prefix: s.table_prefix.clone(),
        kinesis_endpoint_url: opt(&s.kinesis_endpoint_url),
        dynamodb_endpoint_url: opt(&s.dynamodb_endpoint_url),
        stream_retention_hours: s.stream_retention_hours,
    }
}
