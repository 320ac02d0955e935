//! The shared contract suite (persistence.md section 4) against the redb
//! store.

use dsh_redb::{RedbStore, raw};
use dsh_store::contract::Harness;
use dsh_store::{CoordinatorConfig, StoreError};

struct Redb {
    dir: tempfile::TempDir,
}

impl Redb {
    fn new() -> Self {
        Redb {
            dir: tempfile::tempdir().unwrap(),
        }
    }
}

impl Harness for Redb {
    type Store = RedbStore;

    fn try_open_with(&self, config: CoordinatorConfig) -> Result<RedbStore, StoreError> {
        dsh_redb::open(&self.dir.path().join("sessions.redb"), config)
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

dsh_store::contract_tests!(Redb::new());
