//! The top-p nucleus of a whole-vocabulary draw found by selection on mass instead of
//! a sort (decision 164).

/// Candidates [`nucleus`] sorts rather than splitting further.
const NUCLEUS_SORT: usize = 64;

/// Orders candidates by logit, highest first; equal logits by lowest id.
pub(super) fn by_logit_desc(a: &(u32, f32), b: &(u32, f32)) -> std::cmp::Ordering {
    b.1.total_cmp(&a.1).then(a.0.cmp(&b.0))
}

/// Moves the nucleus of `cands` (ids with sanitized logits) to the front and returns
/// its size: the fewest best tokens, by logit then lowest id, whose weights
/// (`weights[id]`) reach `target`, else all of them. A selection by mass rather than
/// a sort: each round splits the undecided range at its middle by
/// `select_nth_unstable` and keeps the half where the running sum crosses `target`
/// (linear time in all), and only the last 64 are sorted. The nucleus's tokens end up
/// ahead of every other, in no particular order before its last few.
pub(super) fn nucleus(cands: &mut [(u32, f32)], weights: &[f32], target: f64) -> usize {
    let weight = |c: &(u32, f32)| f64::from(weights[c.0 as usize]);
    // cands[..lo] are in the nucleus with weight `cum` < target; it ends within lo..hi.
    let (mut lo, mut hi, mut cum) = (0, cands.len(), 0.0f64);
    while hi - lo > NUCLEUS_SORT {
        let mid = lo + (hi - lo) / 2;
        cands[lo..hi].select_nth_unstable_by(mid - lo, by_logit_desc);
        let upper: f64 = cands[lo..=mid].iter().map(weight).sum();
        if cum + upper >= target {
            hi = mid + 1;
        } else {
            cum += upper;
            lo = mid + 1;
        }
    }
    cands[lo..hi].sort_unstable_by(by_logit_desc);
    for (i, c) in cands[lo..hi].iter().enumerate() {
        cum += weight(c);
        if cum >= target {
            return lo + i + 1;
        }
    }
    // Summed in another order, the halves' weights may round past `target` where the
    // token-by-token sum stops just short of it: then the range is the nucleus.
    hi
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A xorshift64 generator started at `state`.
    fn xorshift(mut state: u64) -> impl FnMut() -> u64 {
        move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        }
    }

    /// The nucleus selected by mass holds the tokens of the prefix a full sort gives,
    /// across the splits and with tied logits.
    #[test]
    fn the_selected_nucleus_is_the_sorted_prefix() {
        let mut next = xorshift(0x51A7_E5EE_D00D_F00D);
        for len in [1, 5, 64, 65, 200, 1000, 5000] {
            for top_p in [0.05, 0.3, 0.9, 0.99, 0.9999] {
                let logits: Vec<f32> = (0..len)
                    .map(|_| (next() % 400) as f32 / 40.0 - 5.0)
                    .collect();
                let weights: Vec<f32> = logits.iter().map(|&l| (l - 5.0).exp()).collect();
                let total: f64 = weights.iter().map(|&w| f64::from(w)).sum();
                let target = top_p * total;
                let mut all: Vec<(u32, f32)> = logits
                    .iter()
                    .enumerate()
                    .map(|(i, &l)| (i as u32, l))
                    .collect();
                let mut cands = all.clone();
                all.sort_unstable_by(by_logit_desc);
                let mut cum = 0.0;
                let want = all
                    .iter()
                    .position(|&(id, _)| {
                        cum += f64::from(weights[id as usize]);
                        cum >= target
                    })
                    .map_or(len, |i| i + 1);
                let keep = nucleus(&mut cands, &weights, target);
                assert_eq!(keep, want, "len {len}, top_p {top_p}");
                cands[..keep].sort_unstable_by(by_logit_desc);
                assert_eq!(cands[..keep], all[..want], "len {len}, top_p {top_p}");
            }
        }
    }
}
