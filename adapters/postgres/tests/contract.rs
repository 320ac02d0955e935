//! The shared contract suite (persistence.md section 4) against the
//! PostgreSQL store, each test in a fresh schema of the test server.

mod common;

use common::Scratch;
use dsh_postgres::{PgStore, raw};
use dsh_store::contract::Harness;
use dsh_store::{CoordinatorConfig, StoreError};

struct Pg(Scratch);

impl Harness for Pg {
    type Store = PgStore;

    fn try_open_with(&self, config: CoordinatorConfig) -> Result<PgStore, StoreError> {
        let mut c = self.0.config();
        c.coordinator = config;
        dsh_postgres::open(c)
    }

    fn write_log(
        &self,
        id: &str,
        _cwd: Option<&str>,
        header: &str,
        lines: &[String],
        torn: Option<&str>,
    ) {
        let s = self.open();
        raw::put_header(&s, id, header).unwrap();
        for (k, l) in lines.iter().enumerate() {
            raw::put_record(&s, id, k as u64, l).unwrap();
        }
        if let Some(t) = torn {
            raw::put_record(&s, id, lines.len() as u64, t).unwrap();
        }
    }

    fn tear(&self, id: &str, _cwd: Option<&str>, fragment: &str) {
        let s = self.open();
        let next = raw::records(&s, id).unwrap().len() as u64;
        raw::put_record(&s, id, next, fragment).unwrap();
    }

    fn snapshot(&self, id: &str, _cwd: Option<&str>) -> Vec<u8> {
        let s = self.open();
        let mut out = Vec::new();
        for (k, v) in raw::records(&s, id).unwrap() {
            out.extend_from_slice(format!("{k}\t{v}\n").as_bytes());
        }
        out
    }
}

dsh_store::contract_tests!(match Scratch::new() {
    Some(s) => Pg(s),
    None => return,
});
