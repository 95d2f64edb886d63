//! Turning an endpoint reference (a bundle's `model.endpoint`, a `--endpoint`
//! flag, a configured endpoint) into a `ChatBackend`.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::bundle::EndpointRef;
use crate::client::{ChatBackend, ClientError, EndpointSettings, HttpBackend, ScriptedBackend};
use crate::mock::{Script, ScriptError};

#[derive(Debug, thiserror::Error)]
pub enum EndpointError {
    #[error(
        "unknown endpoint {0:?}: define it under [endpoints] in the daemon config, or pass --endpoint URL"
    )]
    Unknown(String),
    #[error(transparent)]
    Script(#[from] ScriptError),
    #[error(transparent)]
    Client(#[from] ClientError),
}

/// Builds the backend a bundle's requests go to. `named` holds the
/// configured endpoints by name.
pub fn backend_for(
    endpoint: &EndpointRef,
    named: &BTreeMap<String, Arc<dyn ChatBackend>>,
) -> Result<Arc<dyn ChatBackend>, EndpointError> {
    Ok(match endpoint {
        EndpointRef::Named(name) => named
            .get(name)
            .cloned()
            .ok_or_else(|| EndpointError::Unknown(name.clone()))?,
        EndpointRef::Url(url) => Arc::new(HttpBackend::new(EndpointSettings::new(
            url.clone(),
            url.clone(),
        ))?),
        EndpointRef::Scripted(path) => Arc::new(ScriptedBackend::new(
            path.display().to_string(),
            Script::load(path)?,
        )),
    })
}
