//! The scheduler on the default model: generations admitted at different steps and
//! stepped together give token for token what `generate` gives each alone; a request
//! that cannot run is refused without touching the others; a cancelled sequence leaves;
//! a bug in one sequence's step fails that sequence alone.

use std::collections::HashMap;
use std::sync::Arc;

use switchyard::backend::fault::{FaultKind, Faulty};
use switchyard::backend::{cpu::CpuBackend, Backend, BackendSet, Fault, KV_BLOCK};
use switchyard::decode::sampler::{Sampler, SamplerConfig};
use switchyard::decode::{
    generate, prompt_logprobs, FinishReason, GenerateOptions, Generation, TokenLogprobs,
};
use switchyard::model::{fetch, Model};
use switchyard::sched::{Event, Limits, Request, Scheduler};
use switchyard::step::{step_bucket, Runner, PREFILL_CHUNK};

fn load() -> (Model, Runner) {
    let model = Model::open(&fetch::default_model_path(false).unwrap()).unwrap();
    let backends: Vec<Arc<dyn Backend>> = vec![Arc::new(CpuBackend::new(None).unwrap())];
    let runner = model.runner(BackendSet::new(backends).unwrap(), 1024);
    (model, runner)
}

fn greedy() -> SamplerConfig {
    SamplerConfig {
        temperature: 0.0,
        ..SamplerConfig::default()
    }
}

fn options(model: &Model, max_tokens: usize) -> GenerateOptions {
    GenerateOptions {
        max_tokens,
        stop_ids: model.stop_ids.clone(),
        ..GenerateOptions::default()
    }
}

/// Submits `request` and admits it at once (the test's bug if it does not join).
fn join(scheduler: &mut Scheduler<'_, u64>, runner: &Runner, id: u64, request: Request) {
    scheduler.submit(id, request);
    let joined = scheduler.admit(runner, &mut |_, _| panic!("request {id} was refused"));
    assert_eq!(joined, 1, "request {id} waits");
}

#[test]
fn staggered_generations_match_each_run_alone() {
    let (model, mut runner) = load();
    let prompts: Vec<Vec<u32>> = (0..6)
        .map(|i| {
            let text = format!(
                "Tell me fact number {i} about {}.",
                ["cats", "rain", "salt"][i % 3]
            );
            model
                .tokenizer
                .encode_chat(&text.repeat(1 + 5 * (i % 2)))
                .unwrap()
        })
        .collect();
    let alone: Vec<Generation> = prompts
        .iter()
        .map(|p| {
            let mut sampler = Sampler::new(greedy()).unwrap();
            generate(
                &mut runner,
                &model.tokenizer,
                &mut sampler,
                p,
                &options(&model, 16),
                &mut |_| true,
            )
            .unwrap()
        })
        .collect();

    let limits = Limits::new(4, 24).unwrap();
    let mut scheduler = Scheduler::new(&model.tokenizer, limits);
    let mut texts: HashMap<u64, String> = HashMap::new();
    let mut done: HashMap<u64, Generation> = HashMap::new();
    let mut next = 0;
    let mut largest = 0;
    // Steps where a prompt rode beside more than half a batch of decodes, and steps
    // beside half or fewer that took more than that bound allows: both budgets in use.
    let (mut bounded, mut whole) = (0, 0);
    for _ in 0..1000 {
        // Admit one waiting prompt per step while there is room.
        if next < prompts.len() && scheduler.has_room() {
            let request = Request {
                prompt: prompts[next].clone(),
                options: options(&model, 16),
                sampler: greedy(),
                score: None,
            };
            scheduler.submit(next as u64, request);
            next += 1;
        }
        if scheduler.is_idle() {
            break;
        }
        let report = scheduler.step(&mut runner, &mut |&id, event| {
            match event {
                Event::Text { text, .. } => texts.entry(id).or_default().push_str(text),
                Event::Done(result) => {
                    done.insert(id, result.unwrap());
                }
                Event::Prompt { .. } => panic!("no prompt was scored"),
            }
            true
        });
        assert!(report.tokens <= 256, "{report:?}");
        // Beside more than half a batch of decodes, prompts take 24 tokens or what fills
        // the rows the step pads to (with half or fewer, up to a whole step).
        let decodes = report.tokens - report.prompt_tokens;
        if 2 * decodes > limits.max_parallel() {
            assert!(
                report.tokens <= step_bucket(decodes + 24),
                "only a step with half the batch or less decoding is large: {report:?}"
            );
            bounded += usize::from(report.prompt_tokens > 0);
        } else if decodes > 0 {
            whole += usize::from(report.tokens > step_bucket(decodes + 24));
        }
        largest = largest.max(report.sequences);
    }
    assert_eq!(largest, 4, "the batch never filled");
    assert!(
        bounded > 0 && whole > 0,
        "a budget went unused: {bounded} {whole}"
    );
    assert_eq!(done.len(), prompts.len());
    for (i, want) in alone.iter().enumerate() {
        let got = &done[&(i as u64)];
        assert_eq!(got.tokens, want.tokens, "prompt {i}");
        assert_eq!(got.text, want.text, "prompt {i}");
        let streamed = texts.get(&(i as u64)).cloned().unwrap_or_default();
        assert_eq!(streamed, want.text, "prompt {i}: streamed text");
        assert_eq!(got.finish_reason, want.finish_reason);
    }
}

#[test]
fn refusals_and_cancellations_leave_the_others_running() {
    let (model, mut runner) = load();
    let mut scheduler = Scheduler::new(&model.tokenizer, Limits::parallel(2).unwrap());
    let prompt = model.tokenizer.encode_chat("Count to ten.").unwrap();
    let too_long = Request {
        prompt: vec![1; 1100],
        options: options(&model, 4),
        sampler: greedy(),
        score: None,
    };
    scheduler.submit(9, too_long);
    let mut refused = None;
    let joined = scheduler.admit(&runner, &mut |&id, event| {
        if let Event::Done(result) = event {
            refused = Some((id, result.unwrap_err()));
        }
        false
    });
    let (id, err) = refused.expect("the long prompt is refused when its turn comes");
    assert_eq!((joined, id), (0, 9));
    assert!(err.to_string().contains("context holds 1024"), "{err}");
    for id in [1, 2] {
        let request = Request {
            prompt: prompt.clone(),
            options: options(&model, 50),
            sampler: greedy(),
            score: None,
        };
        join(&mut scheduler, &runner, id, request);
    }
    assert!(!scheduler.has_room());
    let mut ended: HashMap<u64, FinishReason> = HashMap::new();
    let mut on_event = |&id: &u64, event: Event<'_>| match event {
        // Sequence 1's client goes away at its first text.
        Event::Text { .. } => id != 1,
        Event::Done(result) => {
            ended.insert(id, result.unwrap().finish_reason);
            false
        }
        Event::Prompt { .. } => true,
    };
    for _ in 0..200 {
        if scheduler.is_idle() {
            break;
        }
        scheduler.step(&mut runner, &mut on_event);
    }
    assert_eq!(ended[&1], FinishReason::Cancelled);
    assert_ne!(ended[&2], FinishReason::Cancelled);
    assert!(Limits::new(0, 64).is_err() && Limits::new(4, 0).is_err());
    assert!(Limits::new(16, 241).is_err() && Limits::new(16, 240).is_ok());
}

/// Each prompt's greedy generation of at most `max_tokens`, alone.
fn alone(
    model: &Model,
    runner: &mut Runner,
    prompts: &[Vec<u32>],
    max_tokens: usize,
) -> Vec<Generation> {
    prompts
        .iter()
        .map(|p| {
            let mut sampler = Sampler::new(greedy()).unwrap();
            let options = options(model, max_tokens);
            generate(
                runner,
                &model.tokenizer,
                &mut sampler,
                p,
                &options,
                &mut |_| true,
            )
            .unwrap()
        })
        .collect()
}

/// A bug in one sequence's step (injected: the CPU fails every run whose tokens hold
/// one id, which only one prompt has) fails that request alone: the batched step it
/// was in runs again one sequence at a time, and the others end with the tokens each
/// gets alone.
#[test]
fn a_bug_in_one_sequences_step_fails_that_request_alone() {
    let (model, mut runner) = load();
    let prompts: Vec<Vec<u32>> = [
        "Name three rivers.",
        "Why is the sky blue?",
        "Write a haiku about a zebra.",
        "Count to five.",
    ]
    .iter()
    .map(|text| model.tokenizer.encode_chat(text).unwrap())
    .collect();
    let alone = alone(&model, &mut runner, &prompts, 12);
    // The poison: a token of the third prompt that no other prompt or generation holds.
    let others: Vec<u32> = (0..4)
        .filter(|&j| j != 2)
        .flat_map(|j| prompts[j].iter().chain(&alone[j].tokens).copied())
        .collect();
    let poison = *prompts[2]
        .iter()
        .find(|t| !others.contains(t))
        .expect("the haiku prompt has a token of its own");
    let cpu: Arc<dyn Backend> = Arc::new(CpuBackend::new(None).unwrap());
    let fault = FaultKind::BugOn {
        input: "tokens".into(),
        value: poison as i32,
    };
    let faulty: Arc<dyn Backend> = Arc::new(Faulty::new(cpu, fault));
    let mut runner = model.runner(BackendSet::new(vec![faulty]).unwrap(), 1024);
    let mut scheduler = Scheduler::new(&model.tokenizer, Limits::parallel(4).unwrap());
    for (id, prompt) in prompts.iter().enumerate() {
        let request = Request {
            prompt: prompt.clone(),
            options: options(&model, 12),
            sampler: greedy(),
            score: None,
        };
        scheduler.submit(id as u64, request);
    }
    let mut ended = HashMap::new();
    let mut on_event = |&id: &u64, event: Event<'_>| {
        if let Event::Done(result) = event {
            ended.insert(id as usize, result);
        }
        true
    };
    let first = scheduler.step(&mut runner, &mut on_event);
    assert_eq!(first.sequences, 4, "every prompt rides in the first step");
    for _ in 0..100 {
        if scheduler.is_idle() {
            break;
        }
        scheduler.step(&mut runner, &mut on_event);
    }
    let failed = ended
        .remove(&2)
        .expect("the poisoned request ended")
        .unwrap_err();
    assert_eq!(failed.fault(), Some(Fault::Bug), "{failed}");
    assert!(failed.is_internal(), "{failed}");
    assert!(failed.to_string().contains("injected"), "{failed}");
    for j in [0, 1, 3] {
        let got = ended[&j].as_ref().expect("the others finish");
        assert_eq!(got.tokens, alone[j].tokens, "request {j}");
    }
}

#[test]
fn a_shared_prompt_prefix_is_evaluated_once_and_changes_nothing() {
    let (model, mut runner) = load();
    let shared = "You are a careful assistant. Answer briefly and exactly. ".repeat(48);
    let prompt = |question: &str| {
        model
            .tokenizer
            .encode_chat(&format!("{shared}\n{question}"))
            .unwrap()
    };
    let (first, second) = (prompt("What is salt?"), prompt("Why is the sky blue?"));
    let common = first
        .iter()
        .zip(&second)
        .take_while(|(a, b)| a == b)
        .count();
    assert!(common >= 500, "only {common} tokens in common");
    let mut sampler = Sampler::new(greedy()).unwrap();
    let alone = generate(
        &mut runner,
        &model.tokenizer,
        &mut sampler,
        &second,
        &options(&model, 8),
        &mut |_| true,
    )
    .unwrap();

    let mut scheduler = Scheduler::new(&model.tokenizer, Limits::parallel(2).unwrap());
    let mut prompt_tokens = [0usize; 2];
    let mut done = HashMap::new();
    for (id, p) in [(0u64, &first), (1, &second)] {
        let request = Request {
            prompt: p.clone(),
            options: options(&model, 8),
            sampler: greedy(),
            score: None,
        };
        scheduler.submit(id, request);
        while !scheduler.is_idle() {
            let report = scheduler.step(&mut runner, &mut |&id, event| {
                if let Event::Done(result) = event {
                    done.insert(id, result.unwrap());
                }
                true
            });
            prompt_tokens[id as usize] += report.prompt_tokens;
        }
    }
    let stats = scheduler.prefix_stats();
    assert_eq!((stats.lookups, stats.hits), (2, 1), "{stats:?}");
    // Reused to the token, not to a whole KV block (`common` is not a multiple of 32).
    assert_ne!(common % 32, 0, "pick prompts that part inside a block");
    let reused = common;
    assert_eq!(stats.reused_tokens as usize, reused);
    assert_eq!(prompt_tokens[0], first.len());
    assert_eq!(prompt_tokens[1], second.len() - reused);
    assert_eq!(done[&1].tokens, alone.tokens, "reuse changed the output");
}

#[test]
fn a_running_prompt_is_shared_by_whole_blocks_and_an_ended_one_to_the_token() {
    let (model, mut runner) = load();
    let prompt = model
        .tokenizer
        .encode_chat(&"Name a colour of the sea. ".repeat(8))
        .unwrap();
    let whole = prompt.len() / KV_BLOCK * KV_BLOCK;
    assert!(whole > 0 && whole < prompt.len(), "{} tokens", prompt.len());
    let request = || Request {
        prompt: prompt.clone(),
        options: options(&model, 6),
        sampler: greedy(),
        score: None,
    };
    let mut scheduler = Scheduler::new(&model.tokenizer, Limits::parallel(2).unwrap());
    let mut done: HashMap<u64, Generation> = HashMap::new();
    let mut texts = 0;
    let mut step = |scheduler: &mut Scheduler<'_, u64>, runner: &mut Runner| {
        scheduler.step(runner, &mut |&id, event| {
            match event {
                Event::Text { .. } => texts += 1,
                Event::Done(result) => {
                    done.insert(id, result.unwrap());
                }
                Event::Prompt { .. } => panic!("no prompt was scored"),
            }
            true
        });
    };
    join(&mut scheduler, &runner, 0, request());
    step(&mut scheduler, &mut runner);
    step(&mut scheduler, &mut runner);
    // Sequence 0 is generating: a second request shares its whole blocks only (the
    // block sequence 0 writes into stays its own).
    join(&mut scheduler, &runner, 1, request());
    let stats = scheduler.prefix_stats();
    assert_eq!(
        (stats.hits, stats.reused_tokens),
        (1, whole as u64),
        "{stats:?}"
    );
    while scheduler.running() > 0 {
        step(&mut scheduler, &mut runner);
    }
    // Ended, the prompt is shared to the token (all but the one that gives logits).
    join(&mut scheduler, &runner, 2, request());
    while scheduler.running() > 0 {
        step(&mut scheduler, &mut runner);
    }
    let stats = scheduler.prefix_stats();
    let reused = (whole + prompt.len() - 1) as u64;
    assert_eq!((stats.hits, stats.reused_tokens), (2, reused), "{stats:?}");
    assert!(texts > 0);
    assert_eq!(
        done[&1].tokens, done[&0].tokens,
        "whole-block reuse changed the output"
    );
    assert_eq!(
        done[&2].tokens, done[&0].tokens,
        "reuse to the token changed the output"
    );
}

#[test]
fn kv_positions_free_follow_the_reservations_under_a_budget() {
    let (model, runner) = load();
    let prompt = model.tokenizer.encode_chat("Count to ten.").unwrap();
    let request = || Request {
        prompt: prompt.clone(),
        options: options(&model, 50),
        sampler: greedy(),
        score: None,
    };
    let unbounded: Scheduler<'_, u64> =
        Scheduler::new(&model.tokenizer, Limits::parallel(2).unwrap());
    assert_eq!(unbounded.kv_free(), None);
    let limits = Limits::parallel(2).unwrap().with_kv_positions(300);
    let mut scheduler = Scheduler::new(&model.tokenizer, limits);
    assert_eq!(scheduler.kv_free(), Some(300));
    join(&mut scheduler, &runner, 1, request());
    let reserved = prompt.len() + 50;
    assert_eq!(scheduler.kv_reserved(), reserved);
    assert_eq!(scheduler.kv_free(), Some(300 - reserved));
}

/// A scored prompt (a completion's `echo` with `logprobs`) rides in steps beside
/// decoding sequences, a chunk at a time within the step's token budget: its scores are
/// bit for bit what the unbatched path gives, the sequences beside it get their
/// alone-tokens, and a second identical scored prompt takes its scores and KV blocks
/// from the prefix cache.
#[test]
fn a_scored_prompt_rides_in_steps_and_a_second_copy_reuses_the_prefix_cache() {
    let (model, mut runner) = load();
    let text = "The tide comes in and the tide goes out, twice a day. ".repeat(20);
    let scored = model.tokenizer.encode(&text, true).unwrap();
    assert!(scored.len() > 3 * PREFILL_CHUNK, "{} tokens", scored.len());
    let unbatched = prompt_logprobs(&mut runner, &scored, 2).unwrap();
    let streams: Vec<Vec<u32>> = ["Count to twenty.", "Name the planets."]
        .iter()
        .map(|t| model.tokenizer.encode_chat(t).unwrap())
        .collect();
    let alone = alone(&model, &mut runner, &streams, 40);
    let request = |prompt: &[u32], max_tokens, score| Request {
        prompt: prompt.to_vec(),
        options: options(&model, max_tokens),
        sampler: greedy(),
        score,
    };

    let mut scheduler = Scheduler::new(&model.tokenizer, Limits::parallel(4).unwrap());
    let mut seen = Seen::default();
    for (id, prompt) in streams.iter().enumerate() {
        scheduler.submit(id as u64, request(prompt, 40, None));
    }
    scheduler.step(&mut runner, &mut |&id, e| seen.on(id, e));
    scheduler.submit(2, request(&scored, 3, Some(2)));
    let mut rode = 0;
    while !scheduler.is_idle() {
        let report = scheduler.step(&mut runner, &mut |&id, e| seen.on(id, e));
        // One chunk at a time, never the whole prompt in one pass; a scored token
        // weighs two.
        assert!(report.prompt_tokens <= PREFILL_CHUNK / 2, "{report:?}");
        if report.prompt_tokens > 0 && report.tokens - report.prompt_tokens == 2 {
            rode += 1;
        }
    }
    assert!(
        rode >= scored.len().div_ceil(PREFILL_CHUNK / 2),
        "the scored prompt rode beside both decodes in {rode} steps"
    );
    assert!(!seen.text_before_scores, "the scores come before the text");
    assert_eq!(
        seen.scores[&2], unbatched,
        "scoring in steps changed the scores"
    );
    for (j, want) in alone.iter().enumerate() {
        assert_eq!(seen.done[&(j as u64)].tokens, want.tokens, "stream {j}");
    }

    let before = scheduler.prefix_stats();
    scheduler.submit(3, request(&scored, 3, Some(2)));
    let mut evaluated = 0;
    while !scheduler.is_idle() {
        let report = scheduler.step(&mut runner, &mut |&id, e| seen.on(id, e));
        evaluated += report.prompt_tokens;
    }
    let after = scheduler.prefix_stats();
    assert_eq!(after.hits, before.hits + 1, "{after:?}");
    let reused = after.reused_tokens - before.reused_tokens;
    assert_eq!(reused as usize, scored.len() - 1, "{after:?}");
    assert_eq!(
        evaluated, 1,
        "only the last prompt token is evaluated again"
    );
    assert_eq!(seen.scores[&3], unbatched, "reused scores differ");
    assert_eq!(seen.done[&3].tokens, seen.done[&2].tokens);
    // Fewer alternatives reuse the same entry: each place's first of them.
    scheduler.submit(4, request(&scored, 1, Some(1)));
    while !scheduler.is_idle() {
        scheduler.step(&mut runner, &mut |&id, e| seen.on(id, e));
    }
    assert_eq!(scheduler.prefix_stats().hits, after.hits + 1);
    let fewer = prompt_logprobs(&mut runner, &scored, 1).unwrap();
    assert_eq!(seen.scores[&4], fewer);
}

/// What a test's requests were told: scores, ends, and whether a scored request's text
/// came before its scores.
#[derive(Default)]
struct Seen {
    scores: HashMap<u64, Vec<TokenLogprobs>>,
    done: HashMap<u64, Generation>,
    text_before_scores: bool,
}

impl Seen {
    fn on(&mut self, id: u64, event: Event<'_>) -> bool {
        match event {
            Event::Prompt { logprobs } => {
                let first = self.scores.insert(id, logprobs.to_vec()).is_none();
                assert!(first, "request {id} was scored twice");
            }
            Event::Text { .. } => {
                self.text_before_scores |= id >= 2 && !self.scores.contains_key(&id);
            }
            Event::Done(result) => {
                self.done.insert(id, result.unwrap());
            }
        }
        true
    }
}
