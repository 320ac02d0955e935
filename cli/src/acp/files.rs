//! The file tools' text through the client (ACP `fs/read_text_file`,
//! `fs/write_text_file`), so they see and change the editor's buffers,
//! unsaved edits included. Used when the client offers both capabilities.

use std::path::Path;
use std::sync::Arc;

use agent_client_protocol_schema::v1::{
    ReadTextFileRequest, ReadTextFileResponse, WriteTextFileRequest,
};
use dsh_tools::{CancelToken, TextFiles};

use super::rpc::Peer;

/// A [`TextFiles`] backend that asks the client for session `session`.
pub struct ClientFiles {
    peer: Arc<Peer>,
    session: String,
}

impl ClientFiles {
    /// A backend over `peer` for `session`.
    pub fn new(peer: Arc<Peer>, session: String) -> Self {
        ClientFiles { peer, session }
    }
}

impl TextFiles for ClientFiles {
    fn read(&self, path: &Path, cancel: &CancelToken) -> Result<Option<String>, String> {
        // A file the workspace does not have is not found (an editor
        // answers a missing path with an error of its own choosing).
        if std::fs::symlink_metadata(path).is_err() {
            return Ok(None);
        }
        let request = ReadTextFileRequest::new(self.session.clone(), path);
        let value = self.peer.call("fs/read_text_file", &request, cancel)?;
        serde_json::from_value::<ReadTextFileResponse>(value)
            .map(|r| Some(r.content))
            .map_err(|e| format!("unreadable fs/read_text_file answer: {e}"))
    }

    fn write(&self, path: &Path, content: &str, cancel: &CancelToken) -> Result<(), String> {
        let request = WriteTextFileRequest::new(self.session.clone(), path, content);
        self.peer
            .call("fs/write_text_file", &request, cancel)
            .map(|_| ())
            .map_err(String::from)
    }
}
