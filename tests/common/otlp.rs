//! A fake OTLP/HTTP collector on 127.0.0.1 that decodes what the daemon
//! exports (spans, metrics, logs) with the official protobuf definitions.
#![allow(dead_code)]

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use axum::body::Bytes;
use axum::extract::State;
use axum::routing::post;
use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::KeyValue;
use opentelemetry_proto::tonic::common::v1::any_value::Value as AnyValue;
use opentelemetry_proto::tonic::logs::v1::LogRecord;
use opentelemetry_proto::tonic::metrics::v1::Metric;
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message;

pub type Spans = Arc<Mutex<Vec<Span>>>;
/// The metrics and log records received, in arrival order.
#[derive(Default)]
pub struct Received {
    pub metrics: Mutex<Vec<Metric>>,
    pub logs: Mutex<Vec<LogRecord>>,
}

impl Received {
    pub fn metric_names(&self) -> Vec<String> {
        self.metrics
            .lock()
            .unwrap()
            .iter()
            .map(|m| m.name.clone())
            .collect()
    }
}

async fn receive_metrics(State(received): State<Arc<Received>>, body: Bytes) -> &'static str {
    use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
    let request = ExportMetricsServiceRequest::decode(body).expect("OTLP metrics protobuf");
    for resource in request.resource_metrics {
        for scope in resource.scope_metrics {
            received.metrics.lock().unwrap().extend(scope.metrics);
        }
    }
    ""
}

async fn receive_logs(State(received): State<Arc<Received>>, body: Bytes) -> &'static str {
    let request = ExportLogsServiceRequest::decode(body).expect("OTLP logs protobuf");
    for resource in request.resource_logs {
        for scope in resource.scope_logs {
            received.logs.lock().unwrap().extend(scope.log_records);
        }
    }
    ""
}

async fn receive(State(spans): State<Spans>, body: Bytes) -> &'static str {
    let request = ExportTraceServiceRequest::decode(body).expect("OTLP protobuf");
    for resource in request.resource_spans {
        for scope in resource.scope_spans {
            spans.lock().unwrap().extend(scope.spans);
        }
    }
    ""
}

pub async fn collector() -> (String, Spans, Arc<Received>) {
    let spans: Spans = Arc::default();
    let received: Arc<Received> = Arc::default();
    let others = axum::Router::new()
        .route("/v1/metrics", post(receive_metrics))
        .route("/v1/logs", post(receive_logs))
        .with_state(received.clone());
    let app = axum::Router::new()
        .route("/v1/traces", post(receive))
        .with_state(spans.clone())
        .merge(others);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (url, spans, received)
}

pub fn attrs(span: &Span) -> HashMap<String, String> {
    key_values(&span.attributes)
}

/// Attributes as text: scalars as they print, arrays and maps as Debug.
pub fn key_values(attributes: &[KeyValue]) -> HashMap<String, String> {
    attributes
        .iter()
        .map(|kv| {
            let v = match kv.value.as_ref().and_then(|v| v.value.clone()) {
                Some(AnyValue::StringValue(s)) => s,
                Some(AnyValue::IntValue(i)) => i.to_string(),
                Some(AnyValue::DoubleValue(d)) => d.to_string(),
                Some(AnyValue::BoolValue(b)) => b.to_string(),
                Some(AnyValue::ArrayValue(a)) => format!(
                    "{:?}",
                    a.values.iter().map(|v| v.value.clone()).collect::<Vec<_>>()
                ),
                other => format!("{other:?}"),
            };
            (kv.key.clone(), v)
        })
        .collect()
}
