pub async fn setup(_s: &super::AwsSettings, _n: usize) -> Result<String, tally_core::ports::PortError> { Err(tally_core::ports::PortError::Other("todo".into())) }
