//! CartPole-v1 in Rust: Gymnasium's dynamics (Euler steps of 0.02 s), reward 1 per step,
//! terminated when |x| > 2.4 or |theta| > 12 degrees, truncated at 500 steps; reset draws the
//! four state values uniformly from [-0.05, 0.05] with a seeded SplitMix64.

pub const OBS_DIM: usize = 4;
pub const ACTIONS: usize = 2;
pub const MAX_STEPS: u32 = 500;

const GRAVITY: f64 = 9.8;
const MASS_CART: f64 = 1.0;
const MASS_POLE: f64 = 0.1;
const TOTAL_MASS: f64 = MASS_CART + MASS_POLE;
const LENGTH: f64 = 0.5; // half the pole's length
const POLE_MASS_LENGTH: f64 = MASS_POLE * LENGTH;
const FORCE_MAG: f64 = 10.0;
const TAU: f64 = 0.02;
const THETA_LIMIT: f64 = 12.0 * 2.0 * std::f64::consts::PI / 360.0;
const X_LIMIT: f64 = 2.4;

/// SplitMix64: a small seeded generator for resets and tests.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform in [lo, hi).
    pub fn uniform(&mut self, lo: f64, hi: f64) -> f64 {
        lo + (hi - lo) * ((self.next_u64() >> 11) as f64 / (1u64 << 53) as f64)
    }
}

/// What one step returns, as Gymnasium's step does.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct StepResult {
    pub obs: [f32; OBS_DIM],
    pub reward: f32,
    pub terminated: bool,
    pub truncated: bool,
}

#[derive(Clone, Debug)]
pub struct CartPole {
    state: [f64; 4], // x, x_dot, theta, theta_dot
    steps: u32,
    rng: Rng,
}

impl CartPole {
    pub fn new(seed: u64) -> CartPole {
        let mut env = CartPole { state: [0.0; 4], steps: 0, rng: Rng::new(seed) };
        env.reset();
        env
    }

    pub fn obs(&self) -> [f32; OBS_DIM] {
        [self.state[0] as f32, self.state[1] as f32, self.state[2] as f32, self.state[3] as f32]
    }

    pub fn reset(&mut self) -> [f32; OBS_DIM] {
        for v in self.state.iter_mut() {
            *v = self.rng.uniform(-0.05, 0.05);
        }
        self.steps = 0;
        self.obs()
    }

    /// One step with action 0 (push left) or 1 (push right).
    pub fn step(&mut self, action: i32) -> StepResult {
        let [x, x_dot, theta, theta_dot] = self.state;
        let force = if action == 1 { FORCE_MAG } else { -FORCE_MAG };
        let (sin, cos) = theta.sin_cos();
        let temp = (force + POLE_MASS_LENGTH * theta_dot * theta_dot * sin) / TOTAL_MASS;
        let theta_acc = (GRAVITY * sin - cos * temp)
            / (LENGTH * (4.0 / 3.0 - MASS_POLE * cos * cos / TOTAL_MASS));
        let x_acc = temp - POLE_MASS_LENGTH * theta_acc * cos / TOTAL_MASS;
        self.state = [x + TAU * x_dot, x_dot + TAU * x_acc, theta + TAU * theta_dot,
                      theta_dot + TAU * theta_acc];
        self.steps += 1;
        let terminated = self.state[0].abs() > X_LIMIT || self.state[2].abs() > THETA_LIMIT;
        let truncated = !terminated && self.steps >= MAX_STEPS;
        StepResult { obs: self.obs(), reward: 1.0, terminated, truncated }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pushing_one_way_falls_over_within_a_few_dozen_steps() {
        let mut env = CartPole::new(1);
        let first = env.obs();
        assert!(first.iter().all(|v| v.abs() <= 0.05));
        let mut n = 0;
        loop {
            let r = env.step(1);
            n += 1;
            assert_eq!(r.reward, 1.0);
            assert!(!r.truncated);
            if r.terminated {
                // the cart accelerates right; the pole falls left past 12 degrees
                assert!(r.obs[2] < -0.2 && r.obs[1] > 0.0);
                break;
            }
        }
        assert!((5..40).contains(&n), "{}", n);
    }

    #[test]
    fn one_step_matches_the_equations() {
        let mut env = CartPole::new(0);
        env.state = [0.0, 0.0, 0.1, 0.0];
        let r = env.step(0);
        // theta_dot' = TAU * theta_acc with the force -10 (hand-computed from the dynamics)
        let (s, c) = 0.1f64.sin_cos();
        let temp = -10.0 / 1.1;
        let tacc = (9.8 * s - c * temp) / (0.5 * (4.0 / 3.0 - 0.1 * c * c / 1.1));
        assert!((r.obs[3] as f64 - 0.02 * tacc).abs() < 1e-6);
        assert_eq!(r.obs[2], 0.1f32);
    }

    #[test]
    fn truncated_at_500() {
        let mut env = CartPole::new(0);
        env.steps = MAX_STEPS - 1;
        env.state = [0.0; 4];
        let r = env.step(0);
        assert!(r.truncated && !r.terminated);
    }
}
