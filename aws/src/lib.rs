//! The AWS backend (in progress).
pub mod setup;

use tally_core::ports::PortError;

/// Settings of the AWS adapters.
#[derive(Clone, Debug)]
pub struct AwsSettings {
    pub stream: String,
    pub table_prefix: String,
    pub kinesis_endpoint_url: Option<String>,
    pub dynamodb_endpoint_url: Option<String>,
}

pub struct Aws {
    pub stream: tally_embedded_placeholder::Never,
    pub tables: tally_embedded_placeholder::Never,
}
impl Aws {
    pub async fn connect(_s: &AwsSettings) -> Result<Aws, PortError> {
        Err(PortError::Other("aws backend not built yet".into()))
    }
}
pub mod tally_embedded_placeholder { #[derive(Clone)] pub struct Never; }
