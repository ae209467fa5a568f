//! A step's host data for the device, without a queue write: the inputs (token ids,
//! positions, logits rows) and attention's row and block tables are gathered here,
//! written through the mapping of one buffer the partition keeps, and copied to their
//! buffers inside the step's encoder. wgpu stages every `write_buffer` in an allocation
//! of its own and opens a command buffer for the first one after a submit, which cost a
//! decode step more host time than recording a hundred dispatches (decision 148).
//!
//! What a step sent ([`Sent`]: the buffer and the copies, not the bytes) is part of
//! its plan: steps that send the same take the same commands (decision 198).
//!
//! The buffer is mapped again as soon as the step that copies from it is submitted; the
//! map completes when that step does, at the wait that reads its outputs, so the next
//! step finds it mapped and writes without waiting.

use std::sync::{Arc, Mutex, PoisonError};

use super::device::{padded, Gpu};
use crate::backend::BackendError;

/// Bytes queued for buffers, sent together by [`Upload::send`].
#[derive(Default)]
pub(super) struct Upload {
    bytes: Vec<u8>,
    copies: Vec<Copy>,
    /// The mappable buffer the bytes go through, kept between steps (made, or grown,
    /// when a step sends more than it holds).
    buffer: Option<wgpu::Buffer>,
    /// Where the buffer's mapping stands.
    map: Arc<Mutex<Map>>,
}

/// The state of the upload buffer's mapping.
#[derive(Clone, Debug, Default, PartialEq)]
enum Map {
    /// Unmapped, no map asked for (no buffer yet, or a step failed after writing).
    #[default]
    Idle,
    /// Asked for; completes when the step reading the buffer does.
    Pending,
    /// Mapped: the host may write.
    Mapped,
    /// wgpu refused the map.
    Failed(String),
}

/// What a step sent: the buffer its bytes went through and where they go from there.
/// Two steps that send the same are recorded the same, whatever their bytes.
#[derive(Clone, Debug, Default, PartialEq)]
pub(super) struct Sent {
    from: Option<wgpu::Buffer>,
    copies: Vec<Copy>,
}

impl Sent {
    /// Records the copies into `encoder` (before the step's pass, so its dispatches
    /// read them).
    pub fn encode(&self, encoder: &mut wgpu::CommandEncoder) {
        let Some(from) = &self.from else { return };
        for c in &self.copies {
            encoder.copy_buffer_to_buffer(from, c.at, &c.to, 0, c.len);
        }
    }
}

/// One destination: `len` bytes from `at` in the upload go to the start of `to`.
#[derive(Clone, Debug, PartialEq)]
struct Copy {
    to: wgpu::Buffer,
    at: u64,
    len: u64,
}

impl Upload {
    /// Queues `bytes` for the start of `to` (padded with zeros to wgpu's copy
    /// alignment; `to` must hold the padded length).
    pub fn push(&mut self, to: &wgpu::Buffer, bytes: &[u8]) {
        let at = self.bytes.len();
        let len = padded(bytes.len());
        self.bytes.extend_from_slice(bytes);
        self.bytes.resize(at + len as usize, 0);
        self.copies.push(Copy {
            to: to.clone(),
            at: at as u64,
            len,
        });
    }

    /// Writes what was queued through the buffer's mapping (waiting for it only if the
    /// previous step's outputs were never waited for) and returns the copies that take
    /// it to each destination, for the step's encoder to record before its pass.
    /// Leaves the queue empty, also when it fails: a failed step's bytes never reach
    /// the next step's buffers.
    pub fn send(&mut self, gpu: &Gpu) -> Result<Sent, BackendError> {
        let copies = std::mem::take(&mut self.copies);
        let mut bytes = std::mem::take(&mut self.bytes);
        let sent = self.write(gpu, &bytes, copies);
        bytes.clear();
        self.bytes = bytes;
        sent
    }

    /// [`Upload::send`]'s work: `bytes` through the mapping, for `copies`.
    fn write(&mut self, gpu: &Gpu, bytes: &[u8], copies: Vec<Copy>) -> Result<Sent, BackendError> {
        if copies.is_empty() {
            return Ok(Sent::default());
        }
        let need = bytes.len() as u64;
        match &self.buffer {
            Some(b) if b.size() >= need => self.wait_mapped(gpu)?,
            _ => {
                // A new buffer, made mapped, with a state of its own (a map still
                // pending on the one it replaces ends as aborted there).
                let size = (need as usize).next_power_of_two();
                self.buffer = Some(gpu.upload_buffer("step upload", size));
                self.map = Arc::new(Mutex::new(Map::Mapped));
            }
        }
        let buffer = self.buffer.as_ref().expect("made above");
        self.set(Map::Idle);
        gpu.write_mapped(buffer, bytes)?;
        Ok(Sent {
            from: Some(buffer.clone()),
            copies,
        })
    }

    /// Asks for the buffer's mapping again, unless already asked: after the step that
    /// copies from it was submitted, it completes with that step.
    pub fn remap(&self) {
        let Some(buffer) = &self.buffer else { return };
        if self.get() != Map::Idle {
            return;
        }
        self.set(Map::Pending);
        let map = self.map.clone();
        buffer.map_async(wgpu::MapMode::Write, .., move |r| {
            let state = match r {
                Ok(()) => Map::Mapped,
                Err(e) => Map::Failed(e.to_string()),
            };
            *map.lock().unwrap_or_else(PoisonError::into_inner) = state;
        });
    }

    /// Waits, if it must, until the buffer is mapped (a wait only where the previous
    /// step's outputs were never waited for, or it failed after writing).
    fn wait_mapped(&self, gpu: &Gpu) -> Result<(), BackendError> {
        self.remap();
        if self.get() == Map::Pending {
            gpu.wait()?;
        }
        match self.get() {
            Map::Mapped => Ok(()),
            Map::Failed(e) => Err(BackendError::Lost(format!("mapping the step upload: {e}"))),
            state => Err(BackendError::Bug(format!(
                "the step upload is {state:?} after a wait"
            ))),
        }
    }

    fn get(&self) -> Map {
        self.map
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    fn set(&self, state: Map) {
        *self.map.lock().unwrap_or_else(PoisonError::into_inner) = state;
    }
}
