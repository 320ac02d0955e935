//! The shared contract suite (persistence.md section 4) against the JSONL
//! store, in both encodings.

use std::fs;
use std::io::Write;
use std::path::PathBuf;

use dsh_jsonl::frames::FrameWriter;
use dsh_jsonl::layout::{encode_id, project_key};
use dsh_jsonl::{Compression, JsonlConfig, JsonlStore, RAW_NAME, ZSTD_NAME};
use dsh_store::contract::Harness;
use dsh_store::{CoordinatorConfig, StoreError};

struct Jsonl {
    dir: tempfile::TempDir,
    compression: Compression,
}

impl Jsonl {
    fn new(compression: Compression) -> Self {
        Jsonl {
            dir: tempfile::tempdir().unwrap(),
            compression,
        }
    }

    fn path(&self, id: &str, cwd: Option<&str>) -> PathBuf {
        let name = match self.compression {
            Compression::Zstd => ZSTD_NAME,
            Compression::None => RAW_NAME,
        };
        self.dir
            .path()
            .join("root")
            .join(project_key(cwd))
            .join(encode_id(id).unwrap())
            .join(name)
    }

    fn torn_bytes(&self, fragment: &str) -> Vec<u8> {
        match self.compression {
            Compression::None => fragment.as_bytes().to_vec(),
            Compression::Zstd => {
                let mut out = Vec::new();
                FrameWriter::new()
                    .unwrap()
                    .frame(fragment.as_bytes(), &mut out)
                    .unwrap();
                out.truncate(out.len() - 3);
                out
            }
        }
    }
}

impl Harness for Jsonl {
    type Store = JsonlStore;

    fn try_open_with(&self, config: CoordinatorConfig) -> Result<JsonlStore, StoreError> {
        let mut c =
            JsonlConfig::new(self.dir.path().join("root")).with_compression(self.compression);
        c.coordinator = config;
        dsh_jsonl::open(c)
    }

    fn write_log(
        &self,
        id: &str,
        cwd: Option<&str>,
        header: &str,
        lines: &[String],
        torn: Option<&str>,
    ) {
        let path = self.path(id, cwd);
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        let mut body = String::new();
        for l in lines {
            body.push_str(l);
            body.push('\n');
        }
        let mut bytes = match self.compression {
            Compression::None => format!("{header}\n{body}").into_bytes(),
            Compression::Zstd => {
                let mut w = FrameWriter::new().unwrap();
                let mut out = Vec::new();
                w.frame(format!("{header}\n").as_bytes(), &mut out).unwrap();
                w.frame(body.as_bytes(), &mut out).unwrap();
                out
            }
        };
        if let Some(t) = torn {
            bytes.extend_from_slice(&self.torn_bytes(t));
        }
        fs::write(path, bytes).unwrap();
    }

    fn tear(&self, id: &str, cwd: Option<&str>, fragment: &str) {
        let mut f = fs::OpenOptions::new()
            .append(true)
            .open(self.path(id, cwd))
            .unwrap();
        f.write_all(&self.torn_bytes(fragment)).unwrap();
    }

    fn snapshot(&self, id: &str, cwd: Option<&str>) -> Vec<u8> {
        fs::read(self.path(id, cwd)).unwrap()
    }

    fn line_scan_rule(&self) -> bool {
        self.compression == Compression::None
    }
}

mod zstd {
    use super::*;
    dsh_store::contract_tests!(Jsonl::new(Compression::Zstd));
}

mod raw {
    use super::*;
    dsh_store::contract_tests!(Jsonl::new(Compression::None));
}
