//! Batched steps on the default model: sixteen different prompts run together, joining
//! the batch one step after another (so prefill chunks ride with other sequences'
//! decodes), get bit-for-bit the logits, and so the greedy tokens, they get alone; steps
//! that return only tokens pick what the sampler picks from those logits.

use std::sync::Arc;

use switchyard::backend::cpu::cut::Cut;
use switchyard::backend::cpu::draw::{draw, Scratch};
use switchyard::backend::cpu::greedy;
use switchyard::backend::{cpu::CpuBackend, Backend, BackendSet};
use switchyard::decode::sampler::{Sampler, SamplerConfig};
use switchyard::decode::{generate, GenerateOptions};
use switchyard::model::{fetch, Model};
use switchyard::step::{
    DrawSettings, Returned, Returns, Runner, Sequence, StepOutput, Work, PREFILL_CHUNK,
};

const STEPS: usize = 20;

fn runner(model: &Model) -> Runner {
    let backends: Vec<Arc<dyn Backend>> = vec![Arc::new(CpuBackend::new(None).unwrap())];
    model.runner(BackendSet::new(backends).unwrap(), 1024)
}

/// Sixteen prompts of different lengths; one is longer than a prefill chunk.
fn prompts(model: &Model) -> Vec<Vec<u32>> {
    let topics = [
        "the tides",
        "a violin",
        "photosynthesis",
        "the Roman roads",
        "bread",
        "volcanoes",
        "a lighthouse keeper",
        "prime numbers",
        "owls",
        "the printing press",
        "glaciers",
        "chess openings",
        "honey bees",
        "the Moon",
        "rivers",
        "compilers",
    ];
    topics
        .iter()
        .enumerate()
        .map(|(i, topic)| {
            let mut text = format!("Write one sentence about {topic}.");
            if i == 3 {
                text = text.repeat(12);
            }
            model.tokenizer.encode_chat(&text).unwrap()
        })
        .collect()
}

fn argmax(logits: &[f32]) -> u32 {
    let mut best = 0;
    for (i, &v) in logits.iter().enumerate() {
        if v > logits[best] {
            best = i;
        }
    }
    best as u32
}

/// Every logits vector of a greedy run of `prompt` alone: the prompt's, then each step's.
fn alone(runner: &mut Runner, prompt: &[u32]) -> Vec<Vec<f32>> {
    let mut seq = runner.new_sequence().unwrap();
    let mut all = vec![runner.forward(&mut seq, prompt).unwrap()];
    for _ in 0..STEPS {
        let token = argmax(all.last().unwrap());
        all.push(runner.forward(&mut seq, &[token]).unwrap());
    }
    all
}

/// One sequence of the batched run: what it still has to prefill and what it produced.
struct Stream {
    seq: Sequence,
    prompt: Vec<u32>,
    prefilled: usize,
    logits: Vec<Vec<f32>>,
}

#[test]
fn sixteen_sequences_together_get_the_logits_they_get_alone() {
    let path = fetch::default_model_path(false).expect("fetching the default model");
    let model = Model::open(&path).unwrap();
    let prompts = prompts(&model);
    assert!(prompts.iter().any(|p| p.len() > PREFILL_CHUNK));
    let mut solo = runner(&model);
    let want: Vec<_> = prompts.iter().map(|p| alone(&mut solo, p)).collect();

    let mut batched = runner(&model);
    let mut streams: Vec<Stream> = Vec::new();
    let mut sizes = Vec::new();
    for step in 0.. {
        // One new sequence joins at every step.
        if let Some(prompt) = prompts.get(step) {
            streams.push(Stream {
                seq: batched.new_sequence().unwrap(),
                prompt: prompt.clone(),
                prefilled: 0,
                logits: Vec::new(),
            });
        }
        let active: Vec<usize> = (0..streams.len())
            .filter(|&i| streams[i].logits.len() <= STEPS)
            .collect();
        if active.is_empty() {
            break;
        }
        let next: Vec<Vec<u32>> = active
            .iter()
            .map(|&i| {
                let s = &streams[i];
                match s.logits.last() {
                    None => {
                        let end = (s.prefilled + PREFILL_CHUNK).min(s.prompt.len());
                        s.prompt[s.prefilled..end].to_vec()
                    }
                    Some(l) => vec![argmax(l)],
                }
            })
            .collect();
        let mut picked: Vec<&mut Stream> = streams
            .iter_mut()
            .enumerate()
            .filter(|(i, _)| active.contains(i))
            .map(|(_, s)| s)
            .collect();
        // A prompt chunk with more of its prompt to come asks for no logits.
        let wants: Vec<bool> = picked
            .iter()
            .zip(&next)
            .map(|(s, tokens)| !s.logits.is_empty() || s.prefilled + tokens.len() == s.prompt.len())
            .collect();
        let mut work: Vec<Work<'_>> = picked
            .iter_mut()
            .zip(&next)
            .zip(&wants)
            .map(|((s, tokens), &logits)| Work {
                seq: &mut s.seq,
                tokens,
                returns: if logits {
                    Returns::Logits
                } else {
                    Returns::Nothing
                },
            })
            .collect();
        sizes.push(work.len());
        let out = batched.forward_batch(&mut work).unwrap();
        drop(work);
        let wanted = wants.iter().filter(|&&w| w).count();
        assert_eq!(out.len(), wanted, "one logits row per sequence that asked");
        let mut rows = out.iter();
        for ((s, tokens), want) in picked.iter_mut().zip(&next).zip(wants) {
            if want {
                s.prefilled = s.prompt.len();
                let Some(Returned::Logits(row)) = rows.next() else {
                    panic!("a logits row for each sequence that asked");
                };
                s.logits.push(row.to_vec());
            } else {
                s.prefilled += tokens.len();
            }
        }
    }
    assert_eq!(sizes.iter().max(), Some(&16), "batch sizes {sizes:?}");
    for (i, (s, want)) in streams.iter().zip(&want).enumerate() {
        assert_eq!(s.logits.len(), want.len());
        for (step, (got, want)) in s.logits.iter().zip(want).enumerate() {
            let same = got
                .iter()
                .zip(want)
                .all(|(a, b)| a.to_bits() == b.to_bits());
            assert!(
                same,
                "prompt {i}, step {step}: batched logits differ from alone"
            );
        }
    }
    let (prefill, decode) = batched.phase_stats();
    assert!(decode.hits > 0 && prefill.compiles > 0);
}

#[test]
fn a_batch_refuses_too_many_tokens_and_full_contexts() {
    let path = fetch::default_model_path(false).expect("fetching the default model");
    let model = Model::open(&path).unwrap();
    let mut runner = runner(&model);
    let (mut a, mut b) = (
        runner.new_sequence().unwrap(),
        runner.new_sequence().unwrap(),
    );
    let long = vec![1u32; 200];
    let mut work = [
        Work {
            seq: &mut a,
            tokens: &long,
            returns: Returns::Logits,
        },
        Work {
            seq: &mut b,
            tokens: &long,
            returns: Returns::Logits,
        },
    ];
    let err = runner.forward_batch(&mut work).unwrap_err().to_string();
    assert!(err.contains("at most 256 tokens"), "{err}");
    let over = vec![1u32; 1025];
    let mut work = [
        Work {
            seq: &mut a,
            tokens: &[1],
            returns: Returns::Logits,
        },
        Work {
            seq: &mut b,
            tokens: &over[..1025],
            returns: Returns::Logits,
        },
    ];
    assert!(runner.forward_batch(&mut work).is_err());
    assert_eq!(
        (a.len(), b.len()),
        (0, 0),
        "a refused batch changes no sequence"
    );
}

#[test]
fn every_logit_of_a_text_is_the_logit_of_decoding_it_token_by_token() {
    let path = fetch::default_model_path(false).expect("fetching the default model");
    let model = Model::open(&path).unwrap();
    let mut runner = runner(&model);
    // Longer than a prefill chunk, so the rows span two scoring chunks.
    let text =
        "The lighthouse keeper climbed the stairs each evening to light the lamp. ".repeat(8);
    let tokens = model.tokenizer.encode(&text, false).unwrap();
    assert!(tokens.len() > PREFILL_CHUNK + 8, "{} tokens", tokens.len());
    let (head, rest) = tokens.split_at(5);
    let mut scored = runner.new_sequence().unwrap();
    runner.forward(&mut scored, head).unwrap();
    let chunks = runner.forward_every_logit(&mut scored, rest).unwrap();
    let rows: Vec<&[f32]> = chunks.iter().flat_map(|c| c.iter()).collect();
    assert_eq!(rows.len(), rest.len());
    assert_eq!(scored.len(), tokens.len());

    let mut decoded = runner.new_sequence().unwrap();
    runner.forward(&mut decoded, head).unwrap();
    let vocab = model.config.vocab_size;
    for (i, (&token, row)) in rest.iter().zip(&rows).enumerate() {
        let alone = runner.forward(&mut decoded, &[token]).unwrap();
        assert_eq!(row.len(), vocab);
        let worst = alone
            .iter()
            .zip(row.iter())
            .map(|(a, b)| (a - b).abs())
            .fold(0f32, f32::max);
        // Bit for bit: the same kernels take a row whatever else the step holds.
        assert!(worst == 0.0, "row {i}: logits differ by {worst}");
    }
}

/// A step whose sequences ask only for their greedy tokens returns each one's token,
/// the greedy pick of the logits the same step returns when they ask for logits; alone
/// and in a batch, and after a step that mixed the two (which returns logits to all).
#[test]
fn greedy_steps_return_the_greedy_pick_of_the_logits() {
    let path = fetch::default_model_path(false).expect("fetching the default model");
    let model = Model::open(&path).unwrap();
    let mut runner = runner(&model);
    let prompts = prompts(&model);
    let prompts = &prompts[..3];
    let mut logits_seqs: Vec<Sequence> = prompts
        .iter()
        .map(|_| runner.new_sequence().unwrap())
        .collect();
    let mut token_seqs: Vec<Sequence> = prompts
        .iter()
        .map(|_| runner.new_sequence().unwrap())
        .collect();
    let mut next: Vec<Vec<u32>> = prompts.to_vec();
    for step in 0..4 {
        let mixed = step == 2;
        let logits = step_all(&mut runner, &mut logits_seqs, &next, &[Returns::Logits; 3]);
        let heads: Vec<Returns> = (0..3)
            .map(|i| match mixed && i == 1 {
                true => Returns::Logits,
                false => Returns::Token,
            })
            .collect();
        let tokens = step_all(&mut runner, &mut token_seqs, &next, &heads);
        assert_eq!(tokens.len(), prompts.len());
        for (i, (l, t)) in logits.iter().zip(tokens.iter()).enumerate() {
            let Returned::Logits(l) = l else {
                panic!("logits asked, a token returned")
            };
            let expected = greedy(l).map(|t| t as u32);
            let got = match t {
                Returned::Token(t) => {
                    assert!(
                        !mixed,
                        "a step where one sequence asks for logits returns logits"
                    );
                    t
                }
                Returned::Logits(row) => {
                    assert!(mixed, "step {step}: logits where only tokens were asked");
                    greedy(row).map(|t| t as u32)
                }
            };
            assert_eq!(got, expected, "step {step}, sequence {i}");
            next[i] = vec![expected.unwrap()];
        }
    }
    // One sequence alone takes the single-sequence path.
    let (mut a, mut b) = (
        runner.new_sequence().unwrap(),
        runner.new_sequence().unwrap(),
    );
    let alone = runner.forward_greedy(&mut a, &prompts[0]).unwrap();
    let logits = runner.forward(&mut b, &prompts[0]).unwrap();
    assert_eq!(alone, greedy(&logits).map(|t| t as u32));
}

/// One batched step of `seqs`, each fed its `next` tokens and asking for its `heads`.
fn step_all(
    runner: &mut Runner,
    seqs: &mut [Sequence],
    next: &[Vec<u32>],
    heads: &[Returns],
) -> StepOutput {
    let mut work: Vec<Work<'_>> = seqs
        .iter_mut()
        .zip(next)
        .zip(heads)
        .map(|((seq, tokens), &returns)| Work {
            seq,
            tokens,
            returns,
        })
        .collect();
    runner.forward_batch(&mut work).unwrap()
}

/// Steps that draw their tokens (the graph's `Draw` after the head, min-p or not)
/// pick, for each sequence, what the sampler's whole-vocabulary rule picks from the
/// logits the same
/// step returns when asked for them, bit for bit on the CPU; a greedy share in the same
/// step takes the greedy pick (temperature 0), and one sequence alone draws too.
#[test]
fn drawn_steps_return_the_draw_of_the_logits() {
    let path = fetch::default_model_path(false).expect("fetching the default model");
    let model = Model::open(&path).unwrap();
    let mut runner = runner(&model);
    let prompts = prompts(&model);
    let prompts = &prompts[..4];
    // (temperature, min-p, cut) a sequence; the last is greedy.
    let settings = [
        (0.6, 0.0, Cut::NONE),
        (1.0, 0.05, Cut::new(40, 0.95)),
        (1.7, 0.2, Cut::new(0, 0.8)),
        (0.0, 0.0, Cut::NONE),
    ];
    let mut state = 0x005E_ED0F_D4A7_u64;
    let mut bits = move || {
        state = state
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (state >> 32) as u32
    };
    let new_seqs = |runner: &mut Runner| -> Vec<Sequence> {
        prompts
            .iter()
            .map(|_| runner.new_sequence().unwrap())
            .collect()
    };
    let (mut logits_seqs, mut drawn_seqs) = (new_seqs(&mut runner), new_seqs(&mut runner));
    let mut scratch = Scratch::default();
    let mut next: Vec<Vec<u32>> = prompts.to_vec();
    for step in 0..4 {
        let heads: Vec<Returns> = settings
            .iter()
            .map(|&(t, min_p, cut)| {
                DrawSettings::new(t, min_p, cut, bits()).map_or(Returns::Token, Returns::Draw)
            })
            .collect();
        let logits = step_all(&mut runner, &mut logits_seqs, &next, &[Returns::Logits; 4]);
        let picked = step_all(&mut runner, &mut drawn_seqs, &next, &heads);
        for (i, ((l, t), head)) in logits.iter().zip(picked.iter()).zip(&heads).enumerate() {
            let (Returned::Logits(l), Returned::Token(got)) = (l, t) else {
                panic!("step {step}: logits and tokens expected")
            };
            let expected = match head {
                Returns::Draw(d) => {
                    let (t, min_p, cut) = (d.temperature(), d.min_p(), d.cut());
                    draw(l, t, min_p, cut, d.bits(), &mut scratch)
                }
                _ => greedy(l),
            }
            .map(|t| t as u32);
            assert_eq!(got, expected, "step {step}, sequence {i}");
            next[i] = vec![expected.unwrap()];
        }
    }
    let (mut a, mut b) = (
        runner.new_sequence().unwrap(),
        runner.new_sequence().unwrap(),
    );
    let cut = Cut::new(20, 0.9);
    let settings = DrawSettings::new(0.9, 0.1, cut, 0x8000_0001).unwrap();
    let alone = runner
        .forward_token(&mut a, &prompts[0], Returns::Draw(settings))
        .unwrap();
    let logits = runner.forward(&mut b, &prompts[0]).unwrap();
    let expected = draw(&logits, 0.9, 0.1, cut, 0x8000_0001, &mut scratch);
    assert_eq!(alone, expected.map(|t| t as u32));
}

/// A generation whose sampler draws (over the whole vocabulary, or cut by top-k and
/// top-p), or picks greedily or draws after a bias and penalties, takes the same tokens
/// whether its steps pick on the device or return logits for the sampler (asking for
/// the best logits makes them return logits): the edits are the same and the random
/// bits are consumed alike.
#[test]
fn a_seeded_generation_draws_the_same_tokens_on_the_device_as_from_logits() {
    let path = fetch::default_model_path(false).expect("fetching the default model");
    let model = Model::open(&path).unwrap();
    let mut runner = runner(&model);
    let prompt = &prompts(&model)[2];
    let draw = |seed, temperature, min_p, top_k, top_p| SamplerConfig {
        temperature,
        min_p,
        top_k,
        top_p,
        seed,
        ..SamplerConfig::default()
    };
    let configs = [
        draw(1, 1.0, 0.0, 0, 1.0),
        draw(7, 0.7, 0.0, 0, 1.0),
        draw(42, 1.4, 0.05, 0, 1.0),
        draw(3, 0.8, 0.05, 40, 0.95),
        draw(5, 1.0, 0.0, 0, 0.9),
        // Bias and penalties, edited where the logits are computed (decision 202).
        SamplerConfig {
            repetition_penalty: 1.3,
            logit_bias: vec![(29, -2.0), (198, f32::NEG_INFINITY)],
            ..draw(11, 0.0, 0.0, 0, 1.0)
        },
        SamplerConfig {
            frequency_penalty: 0.8,
            presence_penalty: 0.4,
            ..draw(13, 0.9, 0.0, 40, 0.95)
        },
    ];
    for config in configs {
        let (seed, temperature) = (config.seed, config.temperature);
        let run = |runner: &mut Runner, top_logits: usize| {
            let options = GenerateOptions {
                max_tokens: 24,
                top_logits,
                ..GenerateOptions::default()
            };
            let mut sampler = Sampler::new(config.clone()).unwrap();
            generate(
                runner,
                &model.tokenizer,
                &mut sampler,
                prompt,
                &options,
                &mut |_| true,
            )
            .unwrap()
            .tokens
        };
        let on_device = run(&mut runner, 0);
        let from_logits = run(&mut runner, 1);
        assert_eq!(on_device.len(), 24, "seed {seed}");
        assert_eq!(
            on_device, from_logits,
            "seed {seed}, temperature {temperature}"
        );
    }
}
