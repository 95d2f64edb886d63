//! The JSON-RPC 2.0 envelope of the A2A interface: the call as a client
//! sends it ([`Envelope`], its [`Method`]) and the response the daemon
//! writes ([`Reply`], also each event of a stream). The same types are read
//! and written by the interface and described in the API document, so the
//! document lists exactly the methods the dispatch serves.

use a2a::A2AError;
use aide::OperationInput;
use aide::generate::GenContext;
use aide::openapi::Operation;
use axum::body::Bytes;
use axum::extract::{FromRequest, Request};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The body of a call, as it came: the interface reads it itself
/// ([`Envelope`]), so that what it cannot read is a JSON-RPC error.
pub struct RpcBody(pub Bytes);

impl<S: Send + Sync> FromRequest<S> for RpcBody {
    type Rejection = <Bytes as FromRequest<S>>::Rejection;

    async fn from_request(request: Request, state: &S) -> Result<Self, Self::Rejection> {
        Bytes::from_request(request, state).await.map(Self)
    }
}

/// The body is an [`Envelope`].
impl OperationInput for RpcBody {
    fn operation_input(ctx: &mut GenContext, operation: &mut Operation) {
        super::super::document::json_request_body::<Envelope>(ctx, operation);
    }
}

/// A JSON-RPC 2.0 call to the A2A interface.
#[derive(Debug, Deserialize, JsonSchema)]
#[schemars(rename = "A2aCall")]
pub struct Envelope {
    /// The protocol version: always `"2.0"` (read only to be checked).
    #[serde(rename = "jsonrpc")]
    _version: Version,
    /// The call's id, given back in its response (a notification, without
    /// one, is answered with `null`). Read before the envelope is, so that
    /// an envelope that does not read is answered under its id too.
    #[serde(default, rename = "id")]
    #[schemars(schema_with = "id_schema")]
    _id: Option<Value>,
    /// The method, by its A2A 1.0 name (v0.3's `message/send` names are
    /// not served).
    #[schemars(with = "Method")]
    pub method: String,
    /// The method's parameters, by the A2A 1.0 specification; proto field
    /// names (`task_id`) are read as their JSON names (`taskId`).
    #[serde(default)]
    #[schemars(with = "Option<serde_json::Map<String, Value>>")]
    pub params: Option<Value>,
}

/// JSON-RPC's version tag.
#[derive(Debug, Clone, Copy, Default, Deserialize, Serialize, JsonSchema)]
#[schemars(rename = "JsonRpcVersion")]
pub enum Version {
    #[default]
    #[serde(rename = "2.0")]
    V2,
}

/// A JSON-RPC id: a string or a number (or `null` where it could not be
/// read).
fn id_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({"type": ["string", "number", "null"]})
}

/// The methods the interface serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[schemars(rename = "A2aMethod")]
pub enum Method {
    SendMessage,
    SendStreamingMessage,
    GetTask,
    ListTasks,
    CancelTask,
    SubscribeToTask,
    GetExtendedAgentCard,
    CreateTaskPushNotificationConfig,
    GetTaskPushNotificationConfig,
    ListTaskPushNotificationConfigs,
    // `ListTaskPushNotificationConfigs` as the specification's table spells it.
    ListTaskPushNotificationConfig,
    DeleteTaskPushNotificationConfig,
}

impl Method {
    /// The method called `name`, if the interface serves it.
    pub fn named(name: &str) -> Option<Self> {
        serde_json::from_value(Value::String(name.to_string())).ok()
    }
}

/// A JSON-RPC response: the call's `result`, or its `error`. A streaming
/// method's events carry one each.
#[derive(Debug, Serialize, JsonSchema)]
#[schemars(rename = "A2aReply")]
pub struct Reply {
    pub jsonrpc: Version,
    /// The id of the call answered (`null` when it could not be read).
    #[schemars(schema_with = "id_schema")]
    pub id: Value,
    #[serde(flatten)]
    pub outcome: Outcome,
}

/// What a call came to.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
#[schemars(rename = "A2aOutcome")]
pub enum Outcome {
    /// The method's result, by the A2A 1.0 specification (a `Task`, a
    /// `ListTasksResponse`, an `AgentCard`, a `StreamResponse`, …).
    #[schemars(with = "serde_json::Map<String, Value>")]
    Result(Value),
    /// Why the call failed.
    Error(ErrorObject),
}

/// A JSON-RPC error: A2A's codes (`-32001` task not found, `-32004`
/// unsupported operation, …) beside JSON-RPC's own.
#[derive(Debug, Serialize, JsonSchema)]
#[schemars(rename = "A2aError")]
pub struct ErrorObject {
    pub code: i32,
    pub message: String,
    /// A2A's error details (an `ErrorInfo` with the reason, …).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub data: Option<Value>,
}

impl Reply {
    pub fn result(id: &Value, result: Value) -> Self {
        Self {
            jsonrpc: Version::V2,
            id: id.clone(),
            outcome: Outcome::Result(result),
        }
    }

    pub fn error(id: &Value, e: &A2AError) -> Self {
        let error = e.to_jsonrpc_error();
        Self {
            jsonrpc: Version::V2,
            id: id.clone(),
            outcome: Outcome::Error(ErrorObject {
                code: error.code,
                message: error.message,
                data: error.data,
            }),
        }
    }

    /// As one SSE event's data, or a response's body.
    pub fn to_json(&self) -> String {
        // Only strings, numbers and JSON values: it always serializes.
        serde_json::to_string(self).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_method_is_read_by_its_wire_name() {
        assert_eq!(Method::named("GetTask"), Some(Method::GetTask));
        assert_eq!(Method::named("message/send"), None);
        assert_eq!(
            Method::named("ListTaskPushNotificationConfig"),
            Some(Method::ListTaskPushNotificationConfig)
        );
    }

    #[test]
    fn a_reply_is_a_result_or_an_error() {
        let ok = serde_json::to_value(Reply::result(&json!(7), json!({"id": "t"}))).unwrap();
        assert_eq!(
            ok,
            json!({"jsonrpc": "2.0", "id": 7, "result": {"id": "t"}})
        );
        let e = A2AError::invalid_params("no");
        let failed = serde_json::to_value(Reply::error(&Value::Null, &e)).unwrap();
        assert_eq!(failed["jsonrpc"], "2.0");
        assert!(failed["id"].is_null());
        assert_eq!(failed["error"]["code"], e.code);
        assert!(failed.get("result").is_none());
    }

    #[test]
    fn an_envelope_needs_version_two() {
        let call: Envelope =
            serde_json::from_value(json!({"jsonrpc": "2.0", "id": "a", "method": "GetTask"}))
                .unwrap();
        assert_eq!(call.method, "GetTask");
        assert!(call.params.is_none());
        let old = json!({"jsonrpc": "1.0", "id": "a", "method": "GetTask"});
        assert!(serde_json::from_value::<Envelope>(old).is_err());
    }
}
