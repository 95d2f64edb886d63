//! A remote agent of the multi-agent runtime for tests: a tiny axum
//! server answering message envelopes.
#![allow(dead_code)]

use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use serde_json::{Value, json};

/// A remote agent over HTTP: answers every envelope with `reply` and keeps
/// the envelopes it received.
pub struct FakeAgent {
    pub url: String,
    seen: Arc<Mutex<Vec<Value>>>,
}

impl FakeAgent {
    pub async fn start(reply: &'static str) -> Self {
        let seen: Arc<Mutex<Vec<Value>>> = Arc::default();
        let app = axum::Router::new().route(
            "/message",
            axum::routing::post({
                let seen = seen.clone();
                move |axum::Json(message): axum::Json<Value>| {
                    let seen = seen.clone();
                    async move {
                        seen.lock().unwrap().push(message.clone());
                        axum::Json(json!({
                            "messageId": uuid::Uuid::new_v4().to_string(),
                            "conversationId": message["conversationId"],
                            "senderId": message["recipientId"],
                            "recipientId": message["senderId"],
                            "content": reply,
                            "timestamp": humantime::format_rfc3339_millis(SystemTime::now()).to_string(),
                            "type": "Text",
                        }))
                    }
                }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/message", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        Self { url, seen }
    }

    pub fn seen(&self) -> Vec<Value> {
        self.seen.lock().unwrap().clone()
    }
}
