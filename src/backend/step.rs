//! Per-step runtime state: what changes between calls of the same compiled executor.
//! Keeping it out of shapes is what lets every decode step reuse one executor.

use std::any::Any;

use super::{BackendError, KvRows, MemorySpace};

/// Element type of a KV cache.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, serde::Serialize)]
pub enum KvDType {
    /// Half precision: half the memory and bandwidth (llama.cpp's default too).
    #[default]
    F16,
    /// Single precision.
    F32,
}

/// Shape of a KV cache: fixed capacity, so graphs never depend on the current length.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KvLayout {
    /// Layers (one per attention node).
    pub n_layers: usize,
    /// Most positions a sequence can hold.
    pub capacity: usize,
    /// Key/value heads.
    pub n_kv_heads: usize,
    /// Dimensions per head.
    pub head_dim: usize,
    /// How keys and values are stored.
    pub dtype: KvDType,
}

impl KvLayout {
    /// Bytes one position takes: keys and values of every layer.
    pub fn position_bytes(&self) -> usize {
        self.checked_position_bytes().unwrap_or(usize::MAX)
    }

    fn checked_position_bytes(&self) -> Option<usize> {
        let per = match self.dtype {
            KvDType::F16 => 2,
            KvDType::F32 => 4,
        };
        [self.n_layers, self.n_kv_heads, self.head_dim, per]
            .into_iter()
            .try_fold(2usize, usize::checked_mul)
    }

    /// Bytes all `capacity` positions take, or an error naming the dimensions when the
    /// product overflows (a hostile or absurd layout).
    pub fn capacity_bytes(&self) -> Result<usize, BackendError> {
        self.checked_position_bytes()
            .and_then(|p| p.checked_mul(self.capacity))
            .ok_or_else(|| {
                BackendError::KvCache(format!(
                    "{} positions × {} layers × {} KV heads × {} dims overflow the address space",
                    self.capacity, self.n_layers, self.n_kv_heads, self.head_dim
                ))
            })
    }
}

/// A device's copy of a sequence's KV cache, kept inside the [`KvCache`] so that it
/// lives exactly as long as the sequence and every executor of it (prefill buckets,
/// decode) reads the same rows.
pub trait DeviceKv: Send + Sync + std::fmt::Debug {
    /// The device's memory space.
    fn space(&self) -> MemorySpace;
    /// Copies positions `0..len` of `layer` from the device into the host rows.
    fn download(
        &self,
        layer: usize,
        len: usize,
        keys: &mut KvRows,
        values: &mut KvRows,
    ) -> Result<(), BackendError>;
    /// Device bytes held.
    fn bytes(&self) -> usize;
    /// The concrete type, for the backend that made it.
    fn as_any(&self) -> &dyn Any;
}

/// What [`KvCache::device_layer`] returns: the device copy, and the host keys and
/// values to upload first when the host held the newest rows of the layer.
pub type DeviceLayer<'a> = (&'a dyn DeviceKv, Option<(&'a KvRows, &'a KvRows)>);

/// One sequence's keys and values. The host rows always exist; a device that runs
/// attention keeps its own copy, and each layer records which space holds its newest
/// rows, so a layer whose attention moves between backends (a prefill plan and a decode
/// plan may differ) is copied across once instead of being read stale. Owned by the
/// sequence, not by any executor.
#[derive(Debug)]
pub struct KvCache {
    layout: KvLayout,
    keys: Vec<KvRows>,
    values: Vec<KvRows>,
    home: Vec<MemorySpace>,
    device: Option<Box<dyn DeviceKv>>,
}

impl KvCache {
    /// An empty cache with room for `layout.capacity` positions; memory is taken block by
    /// block as positions are written. A layout whose full size overflows is refused.
    pub fn new(layout: KvLayout) -> Result<KvCache, BackendError> {
        layout.capacity_bytes()?;
        let width = layout.n_kv_heads * layout.head_dim;
        let layers = || {
            (0..layout.n_layers)
                .map(|_| KvRows::new(layout.dtype, width, layout.capacity))
                .collect()
        };
        Ok(KvCache {
            layout,
            keys: layers(),
            values: layers(),
            home: vec![MemorySpace::HOST; layout.n_layers],
            device: None,
        })
    }

    /// The cache's dimensions.
    pub fn layout(&self) -> KvLayout {
        self.layout
    }

    /// Host keys and values of `layer`, mutably, with positions `0..valid` brought
    /// back from the device first when the device holds the newest rows.
    pub fn layer_mut(
        &mut self,
        layer: usize,
        valid: usize,
    ) -> Result<(&mut KvRows, &mut KvRows), BackendError> {
        self.check_layer(layer)?;
        let (keys, values) = (&mut self.keys[layer], &mut self.values[layer]);
        if self.home[layer] != MemorySpace::HOST {
            let device = self.device.as_deref().ok_or_else(|| {
                BackendError::KvCache(format!("layer {layer} lives on a device that is gone"))
            })?;
            device.download(layer, valid, keys, values)?;
            self.home[layer] = MemorySpace::HOST;
        }
        Ok((keys, values))
    }

    /// Host keys and values of `layer` for reading; the host must hold the layer's
    /// newest rows, as it does after [`KvCache::layer_mut`].
    pub fn layer(&self, layer: usize) -> Result<(&KvRows, &KvRows), BackendError> {
        self.check_layer(layer)?;
        if self.home[layer] != MemorySpace::HOST {
            return Err(BackendError::KvCache(format!(
                "layer {layer}'s newest rows are on a device, not the host"
            )));
        }
        Ok((&self.keys[layer], &self.values[layer]))
    }

    /// The device copy in `space` for attention on `layer`, created by `make` on first
    /// use. Also returns the host rows when the host holds the newest ones for this
    /// layer, which the caller must upload (positions `0..kv_len`) before use; the
    /// layer then counts as living on the device.
    pub fn device_layer(
        &mut self,
        space: MemorySpace,
        layer: usize,
        make: impl FnOnce(KvLayout) -> Result<Box<dyn DeviceKv>, BackendError>,
    ) -> Result<DeviceLayer<'_>, BackendError> {
        self.check_layer(layer)?;
        match &self.device {
            Some(d) if d.space() != space => {
                return Err(BackendError::KvCache(format!(
                    "the cache already has a device copy in {:?}; a second device ({space:?}) is not supported",
                    d.space()
                )))
            }
            Some(_) => {}
            None => self.device = Some(make(self.layout)?),
        }
        let stale = self.home[layer] != space;
        self.home[layer] = space;
        let device = self.device.as_deref().expect("created above");
        let host = stale.then(|| (&self.keys[layer], &self.values[layer]));
        Ok((device, host))
    }

    /// A cache sharing this one's first `len` positions (their blocks are shared, not
    /// copied; a later write to a shared block copies it). Copies positions `0..len` of
    /// layers whose newest rows are on a device to the host first; those layers stay
    /// the device's here, since this cache may hold more than `len` positions (the
    /// prefix cache forks at block boundaries short of a sequence's length). The fork
    /// has no device copy.
    pub fn fork(&mut self, len: usize) -> Result<KvCache, BackendError> {
        if len > self.layout.capacity {
            return Err(BackendError::KvCache(format!(
                "cannot fork {len} positions of a cache of {}",
                self.layout.capacity
            )));
        }
        for layer in 0..self.layout.n_layers {
            if self.home[layer] != MemorySpace::HOST {
                let device = self.device.as_deref().ok_or_else(|| {
                    BackendError::KvCache(format!("layer {layer} lives on a device that is gone"))
                })?;
                device.download(layer, len, &mut self.keys[layer], &mut self.values[layer])?;
            }
        }
        Ok(KvCache {
            layout: self.layout,
            keys: self.keys.iter().map(|k| k.fork(len)).collect(),
            values: self.values.iter().map(|v| v.fork(len)).collect(),
            home: vec![MemorySpace::HOST; self.layout.n_layers],
            device: None,
        })
    }

    /// Drops the device copy when `live` says its memory space is gone (its backend
    /// failed). Returns whether some layer's newest rows were there: the host rows of
    /// those layers are stale and the sequence's positions must be recomputed.
    pub fn drop_lost_device(&mut self, live: impl Fn(MemorySpace) -> bool) -> bool {
        match &self.device {
            Some(device) if !live(device.space()) => {
                self.device = None;
                let stale = self.home.iter().any(|&h| h != MemorySpace::HOST);
                self.home.fill(MemorySpace::HOST);
                stale
            }
            _ => false,
        }
    }

    fn check_layer(&self, layer: usize) -> Result<(), BackendError> {
        if layer >= self.layout.n_layers {
            return Err(BackendError::KvCache(format!(
                "layer {layer} does not exist (cache has {})",
                self.layout.n_layers
            )));
        }
        Ok(())
    }

    /// Bytes held now: the host blocks written so far and any device copy.
    pub fn bytes(&self) -> usize {
        let host: usize = self
            .keys
            .iter()
            .chain(&self.values)
            .map(KvRows::bytes)
            .sum();
        host + self.device.as_ref().map_or(0, |d| d.bytes())
    }
}

/// One sequence's share of a step: which of the step's token rows are its tokens, and
/// the cache they attend over. Rows of no segment (a batch's padding) attend to nothing.
#[derive(Debug)]
pub struct Segment<'a> {
    /// The step's rows holding this sequence's tokens, in order; `0..usize::MAX` for
    /// every row of the step.
    pub rows: std::ops::Range<usize>,
    /// Positions already in the sequence's cache; its tokens are written after them.
    pub kv_len: usize,
    /// The sequence's cache.
    pub kv: &'a mut KvCache,
}

impl Segment<'_> {
    /// The rows of a step of `n` rows this segment covers, checked to lie inside it.
    pub fn rows_within(&self, n: usize) -> Result<std::ops::Range<usize>, BackendError> {
        let end = self.rows.end.min(n);
        if self.rows.start >= end && n > 0 {
            return Err(BackendError::KvCache(format!(
                "segment rows {:?} lie outside a step of {n} rows",
                self.rows
            )));
        }
        Ok(self.rows.start..end)
    }
}

/// Runtime inputs of one step that are not tensors: the sequences whose tokens it
/// evaluates, each with its KV cache. One segment is a single sequence's step; several
/// are a batched step, whose every non-attention op is row-wise and so shared.
#[derive(Debug, Default)]
pub struct StepState<'a> {
    segments: Vec<Segment<'a>>,
    /// The step's row count when it was padded to a bucket (see [`StepState::padded_to`]).
    padded_to: Option<usize>,
}

impl<'a> StepState<'a> {
    /// State for a graph without attention.
    pub fn stateless() -> StepState<'static> {
        StepState::default()
    }

    /// Every row of the step is one sequence's, after the `kv_len` positions `kv` holds.
    pub fn single(kv: &'a mut KvCache, kv_len: usize) -> StepState<'a> {
        StepState {
            segments: vec![Segment {
                rows: 0..usize::MAX,
                kv_len,
                kv,
            }],
            padded_to: None,
        }
    }

    /// Several sequences, each on its own rows; the rows must be ascending and disjoint.
    pub fn batch(segments: Vec<Segment<'a>>) -> Result<StepState<'a>, BackendError> {
        if let Some(w) = segments
            .windows(2)
            .find(|w| w[0].rows.end > w[1].rows.start || w[0].rows.is_empty())
        {
            return Err(BackendError::KvCache(format!(
                "batch segments {:?} and {:?} overlap or are out of order",
                w[0].rows, w[1].rows
            )));
        }
        Ok(StepState {
            segments,
            padded_to: None,
        })
    }

    /// Marks the step as `rows` rows padded past its segments' last row (a graph
    /// compiled for a bucket of rows). Row-wise work on a matrix of exactly `rows` rows
    /// may then skip the padding ([`StepState::live_rows`]): those rows come out zero.
    /// Without it every row is computed.
    pub fn padded_to(mut self, rows: usize) -> StepState<'a> {
        self.padded_to = Some(rows);
        self
    }

    /// How many leading rows of an `m`-row matrix of this step hold tokens: up to the
    /// last segment's last row when `m` is the padded row count, else all `m`.
    pub fn live_rows(&self, m: usize) -> usize {
        match (self.padded_to, self.segments.last()) {
            (Some(rows), Some(last)) if rows == m => last.rows.end.min(m),
            _ => m,
        }
    }

    /// The step's sequences.
    pub fn segments(&self) -> &[Segment<'a>] {
        &self.segments
    }

    /// The step's sequences, mutably (their caches are written by attention).
    pub fn segments_mut(&mut self) -> &mut [Segment<'a>] {
        &mut self.segments
    }
}

#[cfg(test)]
mod tests {
    use super::{KvCache, KvDType, KvLayout};

    #[test]
    fn a_layout_whose_size_overflows_is_refused_by_its_dimensions() {
        let layout = |capacity| KvLayout {
            n_layers: 30,
            capacity,
            n_kv_heads: 3,
            head_dim: 64,
            dtype: KvDType::F16,
        };
        assert_eq!(
            layout(2048).capacity_bytes().unwrap(),
            2048 * 30 * 3 * 64 * 2 * 2
        );
        assert!(KvCache::new(layout(2048)).is_ok());
        let err = KvCache::new(layout(usize::MAX / 1000))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("overflow") && err.contains("30 layers"),
            "{err}"
        );
        let huge = KvLayout {
            head_dim: usize::MAX / 2,
            ..layout(1)
        };
        assert_eq!(huge.position_bytes(), usize::MAX, "saturates, never wraps");
    }
}
