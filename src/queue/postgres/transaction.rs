//! [`PgTx`], what PostgreSQL's statements run on: a transaction or (for
//! reads) a pooled connection, each statement prepared once per connection
//! and counted as it is sent; and how the driver's rows and errors read as
//! the queue's (`Columns`, `Fail`).

use deadpool_postgres::GenericClient;
use tokio_postgres::Row;
use tokio_postgres::error::SqlState;
use tokio_postgres::types::{ToSql, Type};

use super::describe;
use crate::queue::JobId;
use crate::queue::tx::{Change, Columns, Fail, Res};

impl From<tokio_postgres::Error> for Fail {
    /// A deadlock or serialization failure is the database breaking a
    /// conflict with a concurrent write, not a fault of this one: the
    /// writer runs it again (see `writer`).
    fn from(e: tokio_postgres::Error) -> Self {
        let conflict = [
            SqlState::T_R_DEADLOCK_DETECTED,
            SqlState::T_R_SERIALIZATION_FAILURE,
        ];
        match e.code() {
            Some(code) if conflict.contains(code) => Fail::Conflict(describe(&e)),
            _ => Fail::Db(describe(&e)),
        }
    }
}

impl Columns for Row {
    fn text(&self, i: usize) -> Res<Option<String>> {
        Ok(self.try_get(i)?)
    }

    fn int(&self, i: usize) -> Res<Option<i64>> {
        let Some(column) = self.columns().get(i) else {
            return Err(Fail::Db(format!("no column {i}")));
        };
        Ok(match *column.type_() {
            Type::INT2 => self.try_get::<_, Option<i16>>(i)?.map(i64::from),
            Type::INT4 => self.try_get::<_, Option<i32>>(i)?.map(i64::from),
            Type::BOOL => self.try_get::<_, Option<bool>>(i)?.map(i64::from),
            _ => self.try_get::<_, Option<i64>>(i)?,
        })
    }
}

pub(super) type Params<'p> = &'p [&'p (dyn ToSql + Sync)];

/// A transaction (`C` = a `Transaction`) or a read (`C` = a pooled client).
pub(super) struct PgTx<'a, C> {
    client: &'a C,
    pub(super) changes: Vec<(Change, JobId)>,
    /// Statements sent (one round trip each), for `WriteCounts::statements`.
    statements: std::sync::atomic::AtomicU64,
}

impl<'a, C: GenericClient> PgTx<'a, C> {
    pub(super) fn new(client: &'a C) -> Self {
        Self {
            client,
            changes: Vec::new(),
            statements: Default::default(),
        }
    }

    /// Statements this transaction sent so far.
    pub(super) fn statements(&self) -> u64 {
        self.statements.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Counts one statement sent.
    fn sent(&self) {
        self.statements
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }

    pub(super) async fn rows(&self, sql: &str, p: Params<'_>) -> Res<Vec<Row>> {
        let statement = self.client.prepare_cached(sql).await?;
        self.sent();
        Ok(self.client.query(&statement, p).await?)
    }

    /// A listing's query: text arguments, and not cached (its conditions
    /// vary with the filter).
    pub(super) async fn filtered(&self, sql: &str, args: &[String]) -> Res<Vec<Row>> {
        let p: Vec<&(dyn ToSql + Sync)> = args.iter().map(|a| a as &(dyn ToSql + Sync)).collect();
        self.sent();
        Ok(self.client.query(sql, &p).await?)
    }

    pub(super) async fn first(&self, sql: &str, p: Params<'_>) -> Res<Option<Row>> {
        let statement = self.client.prepare_cached(sql).await?;
        self.sent();
        Ok(self.client.query_opt(&statement, p).await?)
    }

    pub(super) async fn exec(&self, sql: &str, p: Params<'_>) -> Res<u64> {
        let statement = self.client.prepare_cached(sql).await?;
        self.sent();
        Ok(self.client.execute(&statement, p).await?)
    }

    pub(super) async fn one_int(&self, sql: &str, p: Params<'_>) -> Res<i64> {
        self.sent();
        let row = self
            .client
            .query_one(&self.client.prepare_cached(sql).await?, p)
            .await?;
        row.req_int(0)
    }

    /// [`Self::rows`] of a statement not kept prepared on the connection.
    pub(super) async fn rows_unprepared(&self, sql: &str, p: Params<'_>) -> Res<Vec<Row>> {
        self.sent();
        Ok(self.client.query(sql, p).await?)
    }

    /// The one row of a statement not kept prepared on the connection.
    pub(super) async fn one_unprepared(&self, sql: &str, p: Params<'_>) -> Res<Row> {
        self.sent();
        Ok(self.client.query_one(sql, p).await?)
    }
}
