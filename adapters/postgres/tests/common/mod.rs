//! The test server: `DSH_TEST_POSTGRES_URL` (set by `.ci/run`, or by
//! `bash adapters/postgres/ci/server.sh start`). Without it a test prints
//! why it is skipped, except under `CI=true`, where it fails.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use dsh_postgres::{PgConfig, PgStore, StoreUrl};
use dsh_store::{CoordinatorConfig, StoreError};

fn random_hex(n: usize) -> String {
    let mut b = vec![0u8; n];
    getrandom::fill(&mut b).unwrap();
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// A fresh schema on the test server, dropped at the end.
pub struct Scratch {
    pub url: String,
    pub schema: String,
}

impl Scratch {
    pub fn new() -> Option<Scratch> {
        let url = dsh_postgres::raw::test_server()?;
        Some(Scratch {
            url,
            schema: format!("dsh_test_{}", random_hex(8)),
        })
    }

    pub fn config(&self) -> PgConfig {
        let mut c = PgConfig::new(StoreUrl::parse(&self.url).unwrap());
        c.schema = Some(self.schema.clone());
        c.coordinator = CoordinatorConfig::default();
        c
    }

    pub fn try_open(&self) -> Result<PgStore, StoreError> {
        dsh_postgres::open(self.config())
    }

    /// A plain client on the server (for what the store never does).
    pub fn client(&self) -> postgres::Client {
        let mut c = postgres::Client::connect(&self.url, postgres::NoTls).unwrap();
        c.batch_execute(&format!("SET search_path TO \"{}\"", self.schema))
            .unwrap();
        c
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        if let Ok(mut c) = postgres::Client::connect(&self.url, postgres::NoTls) {
            let _ = c.batch_execute(&format!(
                "DROP SCHEMA IF EXISTS \"{}\" CASCADE",
                self.schema
            ));
        }
    }
}
