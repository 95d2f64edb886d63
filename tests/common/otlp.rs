//! A fake OTLP/HTTP collector on 127.0.0.1 that decodes what the daemon
//! exports with the official protobuf definitions.
#![allow(dead_code)]

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use axum::body::Bytes;
use axum::extract::State;
use axum::routing::post;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value as AnyValue;
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message;

pub type Spans = Arc<Mutex<Vec<Span>>>;
pub type MetricNames = Arc<Mutex<Vec<String>>>;

async fn receive_metrics(State(names): State<MetricNames>, body: Bytes) -> &'static str {
    use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
    let request = ExportMetricsServiceRequest::decode(body).expect("OTLP metrics protobuf");
    for resource in request.resource_metrics {
        for scope in resource.scope_metrics {
            names
                .lock()
                .unwrap()
                .extend(scope.metrics.into_iter().map(|m| m.name));
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

pub async fn collector() -> (String, Spans, MetricNames) {
    let spans: Spans = Arc::default();
    let names: MetricNames = Arc::default();
    let metrics_app = axum::Router::new()
        .route("/v1/metrics", post(receive_metrics))
        .with_state(names.clone());
    let app = axum::Router::new()
        .route("/v1/traces", post(receive))
        .with_state(spans.clone())
        .merge(metrics_app);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (url, spans, names)
}

pub fn attrs(span: &Span) -> HashMap<String, String> {
    span.attributes
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
