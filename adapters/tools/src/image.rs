//! Images: a content-addressed attachment store on disk and the
//! `read_image` tool.
//!
//! [`Attachments`] keeps each image once, under `<root>/sha256-<hex>`, and
//! hands out the [`ImageAttachment`] reference the session log carries
//! (C-6); the provider adapters read the bytes back through it, checked
//! against the id. Only PNG, JPEG, GIF and WebP are taken, recognised by
//! their bytes (the header gives the dimensions), within the reference's
//! limits: 3.5 MiB, 2000 px a side, 40 megapixels.

use std::io::{Read, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use dsh_core::agent::tools::{ToolDefinition, ToolOutcome};
use dsh_core::{AttachmentId, ContentBlock, ImageAttachment};
use serde_json::json;
use sha2::{Digest, Sha256};

use crate::{Tool, ToolCallRequest, ToolContext, prop};

/// Largest image taken (the reference's default, 3.5 MiB).
pub const MAX_IMAGE_BYTES: u64 = 3_670_016;
/// Longest side taken, in pixels.
pub const MAX_IMAGE_DIMENSION: u64 = 2000;
/// Most pixels taken.
pub const MAX_IMAGE_PIXELS: u64 = 40_000_000;

/// The media type of an image the store takes, from its bytes.
pub fn sniff_media_type(data: &[u8]) -> Option<&'static str> {
    match imagesize::image_type(data).ok()? {
        imagesize::ImageType::Png => Some("image/png"),
        imagesize::ImageType::Jpeg => Some("image/jpeg"),
        imagesize::ImageType::Gif => Some("image/gif"),
        imagesize::ImageType::Webp => Some("image/webp"),
        _ => None,
    }
}

/// The media type a file name declares (`.png`, `.jpg`/`.jpeg`, `.gif`,
/// `.webp`, any case).
pub fn media_type_for_path(path: &str) -> Option<&'static str> {
    let ext = Path::new(path).extension()?.to_str()?.to_ascii_lowercase();
    match ext.as_str() {
        "png" => Some("image/png"),
        "jpg" | "jpeg" => Some("image/jpeg"),
        "gif" => Some("image/gif"),
        "webp" => Some("image/webp"),
        _ => None,
    }
}

/// A content-addressed image store in a directory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Attachments {
    root: PathBuf,
}

impl Attachments {
    /// A store in `root` (made 0700 on the first save).
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Attachments { root: root.into() }
    }

    /// Its folder.
    pub fn root(&self) -> &Path {
        &self.root
    }

    fn path_of(&self, id: &str) -> Option<PathBuf> {
        let hex = id.strip_prefix("sha256:")?;
        (hex.len() == 64
            && hex
                .bytes()
                .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase()))
        .then(|| self.root.join(format!("sha256-{hex}")))
    }

    /// Checks `data` (format, size, dimensions; `declared`, when given,
    /// must match the bytes' format), stores it, and returns its reference.
    pub fn save_image(
        &self,
        data: &[u8],
        declared: Option<&str>,
        name: Option<String>,
    ) -> Result<ImageAttachment, String> {
        let attachment = check_image(data, declared, name)?;
        let path = self
            .path_of(attachment.attachment_id.as_str())
            .ok_or_else(|| "bad attachment id".to_string())?;
        if !path.exists() {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(&self.root)
                .map_err(|e| format!("cannot store the image: {e}"))?;
            // Write beside, then rename: a reader never sees half an image.
            let tmp = self.root.join(format!(
                ".tmp-{}-{}",
                std::process::id(),
                attachment
                    .attachment_id
                    .as_str()
                    .trim_start_matches("sha256:")
            ));
            let mut f = std::fs::OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(true)
                .mode(0o600)
                .open(&tmp)
                .map_err(|e| format!("cannot store the image: {e}"))?;
            f.write_all(data)
                .and_then(|_| f.sync_all())
                .and_then(|_| std::fs::rename(&tmp, &path))
                .map_err(|e| format!("cannot store the image: {e}"))?;
        }
        Ok(attachment)
    }

    /// The bytes of `attachment`, checked against its id and size.
    pub fn read(&self, attachment: &ImageAttachment) -> Result<Vec<u8>, String> {
        let id = attachment.attachment_id.as_str();
        let path = self
            .path_of(id)
            .ok_or_else(|| format!("attachment {id} is not a sha256 id"))?;
        let file = std::fs::File::open(&path).map_err(|e| format!("attachment {id}: {e}"))?;
        let mut data = Vec::new();
        file.take(MAX_IMAGE_BYTES + 1)
            .read_to_end(&mut data)
            .map_err(|e| format!("attachment {id}: {e}"))?;
        if data.len() as u64 != attachment.bytes || sha256_id(&data) != id {
            return Err(format!("attachment {id} does not match its stored bytes"));
        }
        Ok(data)
    }
}

/// `sha256:<64 lowercase hex>` of `data`.
pub fn sha256_id(data: &[u8]) -> String {
    let digest = Sha256::digest(data);
    let mut out = String::from("sha256:");
    for b in digest {
        out.push_str(&format!("{b:02x}"));
    }
    out
}

/// The reference for `data` after the checks [`Attachments::save_image`]
/// makes.
pub fn check_image(
    data: &[u8],
    declared: Option<&str>,
    name: Option<String>,
) -> Result<ImageAttachment, String> {
    if data.len() as u64 > MAX_IMAGE_BYTES {
        return Err(format!(
            "the image is {} bytes, over the {MAX_IMAGE_BYTES}-byte limit",
            data.len()
        ));
    }
    let Some(media_type) = sniff_media_type(data) else {
        return Err("the bytes are not a PNG, JPEG, GIF or WebP image".into());
    };
    if let Some(d) = declared
        && d != media_type
    {
        return Err(format!(
            "the name declares {d}, but the bytes are {media_type}; rename the file to match its format"
        ));
    }
    let size = imagesize::blob_size(data)
        .map_err(|e| format!("cannot read the image's dimensions: {e}"))?;
    let (width, height) = (size.width as u64, size.height as u64);
    if width == 0 || height == 0 {
        return Err("the image has no pixels".into());
    }
    if width > MAX_IMAGE_DIMENSION || height > MAX_IMAGE_DIMENSION {
        return Err(format!(
            "at least one image side exceeds the {MAX_IMAGE_DIMENSION}px limit ({width}x{height}); downscale the image and read the smaller copy"
        ));
    }
    if width.saturating_mul(height) > MAX_IMAGE_PIXELS {
        return Err(format!(
            "the image exceeds the {MAX_IMAGE_PIXELS}-pixel limit; downscale the image and read the smaller copy"
        ));
    }
    let mut attachment = ImageAttachment::new(
        AttachmentId::new(sha256_id(data)),
        media_type,
        width,
        height,
        data.len() as u64,
    );
    attachment.name = name;
    Ok(attachment)
}

/// `read_image {file_path}`: the image file, stored, as an image block
/// beside the reference's text envelope. Register it only for a model
/// that takes images.
#[derive(Clone, Debug)]
pub struct ReadImageTool {
    /// Where the images go.
    pub store: Attachments,
}

const READ_IMAGE_DESCRIPTION: &str = "Read a PNG/JPEG/WebP/GIF file and return the image itself. Requires the current model to accept image input.";

impl Tool for ReadImageTool {
    fn definition(&self) -> ToolDefinition {
        let mut d = ToolDefinition::typed(
            "read_image",
            READ_IMAGE_DESCRIPTION,
            json!({
                "type": "object",
                "properties": {
                    "file_path": prop("string", "Path to the image file, resolved by the filesystem backend."),
                },
                "required": ["file_path"]
            }),
        );
        d.concurrency_safe = true;
        d
    }

    fn execute(&self, call: &ToolCallRequest, ctx: &ToolContext) -> ToolOutcome {
        let raw = call
            .arguments
            .get("file_path")
            .and_then(|v| v.as_str())
            .unwrap_or("");
        if raw.trim().is_empty() {
            return ToolOutcome::error("file_path must be a non-empty string");
        }
        let Some(declared) = media_type_for_path(raw) else {
            return ToolOutcome::error(format!(
                "cannot read \"{raw}\": read_image only accepts PNG/JPEG/WebP/GIF paths"
            ));
        };
        let r = match ctx.workspace.resolve_for(raw, "read") {
            Ok(r) => r,
            Err(o) => return o,
        };
        let file =
            match ctx
                .workspace
                .open_beneath(&r.relative, libc::O_RDONLY | libc::O_NONBLOCK, 0)
            {
                Ok(f) => f,
                Err(e) => return ToolOutcome::error(format!("cannot read \"{}\": {e}", r.display)),
            };
        match file.metadata() {
            Ok(m) if !m.is_file() => {
                return ToolOutcome::error(format!(
                    "cannot read \"{}\": not a regular file",
                    r.display
                ));
            }
            Ok(m) if m.len() > MAX_IMAGE_BYTES => {
                return ToolOutcome::error(format!(
                    "cannot read \"{}\": the image is {} bytes, over the {MAX_IMAGE_BYTES}-byte limit",
                    r.display,
                    m.len()
                ));
            }
            Ok(_) => {}
            Err(e) => return ToolOutcome::error(format!("cannot read \"{}\": {e}", r.display)),
        }
        let mut data = Vec::new();
        if let Err(e) = file.take(MAX_IMAGE_BYTES + 1).read_to_end(&mut data) {
            return ToolOutcome::error(format!("cannot read \"{}\": {e}", r.display));
        }
        let name = Path::new(&r.display)
            .file_name()
            .map(|n| n.to_string_lossy().into_owned());
        let a = match self.store.save_image(&data, Some(declared), name) {
            Ok(a) => a,
            Err(e) => return ToolOutcome::error(format!("cannot read \"{}\": {e}", r.display)),
        };
        let envelope = format!(
            "<path>{}</path>\n<type>image</type>\n<content>\n{} image, {}x{} px, {} bytes\n</content>",
            r.display, a.media_type, a.width, a.height, a.bytes
        );
        let mut image = json!({
            "attachmentId": a.attachment_id.as_str(),
            "mediaType": a.media_type,
            "bytes": a.bytes,
            "width": a.width,
            "height": a.height,
        });
        if let (Some(n), Some(m)) = (&a.name, image.as_object_mut()) {
            m.insert("name".into(), json!(n));
        }
        let mut outcome = ToolOutcome::success(vec![
            ContentBlock::text(envelope),
            ContentBlock::Image { attachment: a },
        ]);
        outcome.value = Some(json!({"path": r.display, "image": image}));
        outcome
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A valid 1-bit grey PNG of `w`x`h` (header only matters here, but the
    /// whole file is well-formed enough for the sniffer).
    pub(crate) fn png(w: u32, h: u32) -> Vec<u8> {
        let mut v = b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR".to_vec();
        v.extend_from_slice(&w.to_be_bytes());
        v.extend_from_slice(&h.to_be_bytes());
        v.extend_from_slice(&[1, 0, 0, 0, 0, 0, 0, 0, 0]);
        v.extend_from_slice(b"\0\0\0\0IEND\xaeB`\x82");
        v
    }

    #[test]
    fn a_png_is_stored_once_and_read_back_checked() {
        let dir = tempfile::tempdir().unwrap();
        let store = Attachments::new(dir.path().join("att"));
        let data = png(3, 2);
        let a = store.save_image(&data, Some("image/png"), None).unwrap();
        assert_eq!((a.width, a.height, a.bytes), (3, 2, data.len() as u64));
        assert_eq!(a.media_type, "image/png");
        assert!(a.attachment_id.as_str().starts_with("sha256:"));
        assert_eq!(store.read(&a).unwrap(), data);
        // A declared type that the bytes contradict is refused.
        let e = store
            .save_image(&data, Some("image/jpeg"), None)
            .unwrap_err();
        assert!(e.contains("the bytes are image/png"), "{e}");
        // Too wide.
        let e = store.save_image(&png(4000, 1), None, None).unwrap_err();
        assert!(e.contains("2000px"), "{e}");
        // Not an image.
        assert!(store.save_image(b"hello", None, None).is_err());
        // Tampered bytes are caught on read.
        let path = dir
            .path()
            .join("att")
            .join(format!("sha256-{}", &a.attachment_id.as_str()[7..]));
        std::fs::write(&path, png(5, 5)).unwrap();
        assert!(store.read(&a).unwrap_err().contains("does not match"));
    }
}
