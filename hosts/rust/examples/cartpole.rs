//! Train a DQN on CartPole (written in Rust, src/cartpole.rs) through the plugin, then
//! evaluate the greedy policy.
//!
//!   cargo run --release --example cartpole -- [steps] [seed]
//!   FOXHUNT_DQN_LIBRARY=../../build cargo run --release --example cartpole
use foxhunt_dqn::cartpole::CartPole;
use foxhunt_dqn::{Learner, Transition};
use std::time::Instant;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let steps: u64 = args.get(1).map(|s| s.parse()).transpose()?.unwrap_or(50_000);
    let seed: u64 = args.get(2).map(|s| s.parse()).transpose()?.unwrap_or(0);
    // configs/ holds the tuned CartPole config; this is the Python adapter's default
    let config = format!(
        r#"{{"obs_dim": 4, "actions": [2], "hidden": [128, 128], "dueling": true,
            "double_dqn": true, "n_step": 3, "lr": 6.3e-4, "batch_size": 64,
            "replay_capacity": 50000, "learning_starts": 1000, "train_freq": 1,
            "target_update_interval": 500, "epsilon_end": 0.04,
            "epsilon_decay_steps": 16000, "seed": {}}}"#,
        seed
    );
    let mut learner = Learner::new(&config)?;
    let mut env = CartPole::new(seed);
    let mut obs = env.reset();
    let mut action = [0i32; 1];
    learner.step(&obs, None, &mut action)?;
    let (mut ret, mut returns) = (0.0f32, Vec::new());
    let t0 = Instant::now();
    for t in 1..=steps {
        let r = env.step(action[0]);
        ret += r.reward;
        let ended = r.terminated || r.truncated;
        let final_obs = r.obs;
        obs = if ended { env.reset() } else { r.obs };
        let tr = Transition {
            rewards: &[r.reward],
            terminated: &[r.terminated],
            truncated: &[r.truncated],
            final_obs: if ended { Some(&final_obs) } else { None },
            valid: None,
        };
        learner.step(&obs, Some(tr), &mut action)?;
        if ended {
            returns.push(ret);
            ret = 0.0;
        }
        if t % 10_000 == 0 {
            let recent = &returns[returns.len().saturating_sub(20)..];
            let mean = recent.iter().sum::<f32>() / recent.len().max(1) as f32;
            println!("step {:6}  episodes {:4}  return(20) {:6.1}  {:.1} s", t, returns.len(),
                     mean, t0.elapsed().as_secs_f64());
        }
    }
    let m = learner.metrics()?;
    println!("trained {} env steps, {} updates in {:.1} s", steps,
             m.get("updates").and_then(|v| v.as_u64()).unwrap_or(0), t0.elapsed().as_secs_f64());
    // greedy evaluation on 20 episodes of a differently seeded env
    let mut eval = CartPole::new(seed + 10_007);
    let mut total = 0.0;
    for _ in 0..20 {
        let mut o = eval.reset();
        loop {
            learner.act(&o, false, &mut action, None)?;
            let r = eval.step(action[0]);
            total += r.reward;
            o = r.obs;
            if r.terminated || r.truncated {
                break;
            }
        }
    }
    println!("eval_return_mean={:.2} episodes=20", total / 20.0);
    Ok(())
}
