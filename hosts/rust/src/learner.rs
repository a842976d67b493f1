//! The safe Learner: created from a JSON config on a Library, destroyed on Drop; every slice
//! is length-checked against the learner's sizes (N, S, D, KT) before the library is called,
//! and what needs ABI minor 1 is refused on a minor-0 table.

use std::ffi::CString;
use std::os::raw::c_char;
use std::path::Path;
use std::ptr;
use std::sync::Arc;

use crate::args::{obs_ptrs, ObsDtype, ObsElem, ObsInfo, TrainStats, Transition, Transitions};
use crate::error::Error;
use crate::ffi;
use crate::json::{self, Value};
use crate::library::{carray, cstr, Library};

/// A learner created from a JSON config; destroyed on Drop.
pub struct Learner {
    lib: Arc<Library>,
    h: *mut ffi::FhdLearner,
    obs_dim: usize,
    obs_info: Option<ObsInfo>,
    num_envs: usize,
    branches: Vec<usize>,
    flags: Vec<u8>, // (3N) terminated, truncated, valid, as 0/1 bytes
}

unsafe impl Send for Learner {}

impl Learner {
    /// A learner from `config_json` with the default library (see Library::open).
    pub fn new(config_json: &str) -> Result<Learner, Error> {
        Learner::with_library(Library::open(None)?, config_json)
    }

    pub fn with_library(lib: Arc<Library>, config_json: &str) -> Result<Learner, Error> {
        let mut h: *mut ffi::FhdLearner = ptr::null_mut();
        let mut err = ffi::FhdError::new();
        let rc = unsafe {
            (lib.api().init.unwrap())(config_json.as_ptr() as *const c_char, config_json.len(),
                                      &mut h, &mut err)
        };
        if rc != ffi::FHD_OK || h.is_null() {
            let code = if err.code != 0 { err.code } else { rc };
            return Err(Error::Config {
                code,
                name: lib.status_name(code),
                path: carray(&err.path),
                line: err.line,
                column: err.column,
                message: carray(&err.message),
            });
        }
        // the library accepted it, so it is valid JSON with actions and obs_dim or obs_shape
        let cfg = json::parse(config_json).unwrap_or(Value::Null);
        let num_envs = cfg.get("num_envs").and_then(Value::as_u64).unwrap_or(1) as usize;
        let branches: Vec<usize> = cfg.get("actions").and_then(Value::as_array)
            .map(|a| a.iter().filter_map(Value::as_u64).map(|k| k as usize).collect())
            .unwrap_or_default();
        let mut l = Learner { lib, h, obs_dim: 0, obs_info: None, num_envs, branches,
                              flags: vec![0; 3 * num_envs] };
        if let Some(f) = l.lib.api().obs_info {
            let mut i = ffi::FhdObsInfo { struct_size: std::mem::size_of::<ffi::FhdObsInfo>()
                                              as u32,
                                          ..Default::default() };
            l.check(unsafe { f(l.h, &mut i) })?;
            let rank = (i.rank as usize).min(3);
            l.obs_info = Some(ObsInfo {
                dtype: if i.dtype == ffi::FHD_OBS_DTYPE_UINT8 {
                    ObsDtype::U8
                } else {
                    ObsDtype::F32
                },
                shape: i.shape[..rank].iter().map(|&x| x as usize).collect(),
                size: i.size as usize,
                frame_stack: i.frame_stack as usize,
                scale: i.scale,
            });
            l.obs_dim = i.size as usize;
        } else {
            // a minor-0 library: S from the config
            l.obs_dim = match cfg.get("obs_dim").and_then(Value::as_u64) {
                Some(s) => s as usize,
                None => cfg.get("obs_shape").and_then(Value::as_array)
                    .map(|a| a.iter().filter_map(Value::as_u64).product::<u64>() as usize)
                    .unwrap_or(0),
            };
        }
        Ok(l)
    }

    /// S, the values per observation.
    pub fn obs_dim(&self) -> usize {
        self.obs_dim
    }
    /// The observation dtype, shape, size, frame_stack and scale, as the library's obs_info
    /// reported them when the learner was created; None with a library without obs_info
    /// (minor 0).
    pub fn obs_info(&self) -> Option<&ObsInfo> {
        self.obs_info.as_ref()
    }
    pub fn num_envs(&self) -> usize {
        self.num_envs
    }
    /// K_d of each branch.
    pub fn branches(&self) -> &[usize] {
        &self.branches
    }
    pub fn library(&self) -> &Arc<Library> {
        &self.lib
    }

    fn fail(&self, rc: i32) -> Error {
        let msg = cstr(unsafe { (self.lib.api().last_error.unwrap())(self.h) });
        Error::Status { code: rc, name: self.lib.status_name(rc), message: msg }
    }

    fn check(&self, rc: i32) -> Result<(), Error> {
        if rc == ffi::FHD_OK {
            Ok(())
        } else {
            Err(self.fail(rc))
        }
    }

    fn len(argument: &'static str, got: usize, expected: usize) -> Result<(), Error> {
        if got != expected {
            return Err(Error::Shape { argument, expected, got });
        }
        Ok(())
    }

    /// Refuses what needs ABI minor 1 when the library has no obs_info (FHD_API_HAS): a
    /// minor-0 library would ignore the trailing fields.
    fn need_minor_1(&self, feature: &'static str, needed: bool) -> Result<(), Error> {
        if needed && !self.lib.has_minor_1() {
            return Err(Error::Unsupported { feature, abi_minor: self.lib.abi_minor });
        }
        Ok(())
    }

    /// The valid mask as 0/1 bytes in flags[2N..3N]; NULL when None.
    fn valid_ptr(&mut self, valid: Option<&[bool]>) -> Result<*const u8, Error> {
        let n = self.num_envs;
        match valid {
            None => Ok(ptr::null()),
            Some(v) => {
                self.need_minor_1("valid", true)?;
                Self::len("valid", v.len(), n)?;
                for (f, &x) in self.flags[2 * n..].iter_mut().zip(v) {
                    *f = x as u8;
                }
                Ok(self.flags[2 * n..].as_ptr())
            }
        }
    }

    /// The agent loop for the N envs (see fhd_step_args), float32 observations: obs (N, S);
    /// `transition` None on the first call (only actions are chosen), else what the envs
    /// returned for the previous actions; actions out (N, D). Returns the training the call
    /// did. Err with Status::ErrDiverged: an update on schedule was not applied, but the
    /// transitions were stored and `actions` holds the chosen actions.
    pub fn step(&mut self, obs: &[f32], transition: Option<Transition>, actions: &mut [i32])
                -> Result<TrainStats, Error> {
        self.step_obs(obs, transition, actions)
    }

    /// step for a uint8 learner (obs_dtype "uint8", ABI minor 1): obs (N, S) bytes.
    pub fn step_u8(&mut self, obs: &[u8], transition: Option<Transition<u8>>,
                   actions: &mut [i32]) -> Result<TrainStats, Error> {
        self.step_obs(obs, transition, actions)
    }

    fn step_obs<T: ObsElem>(&mut self, obs: &[T], transition: Option<Transition<T>>,
                            actions: &mut [i32]) -> Result<TrainStats, Error> {
        let (n, s, d) = (self.num_envs, self.obs_dim, self.branches.len());
        self.need_minor_1("uint8 observations", T::DTYPE == ObsDtype::U8)?;
        Self::len("obs", obs.len(), n * s)?;
        Self::len("actions", actions.len(), n * d)?;
        let mut stats = TrainStats { struct_size: std::mem::size_of::<TrainStats>() as u32,
                                     ..Default::default() };
        let (obs_f, obs_u) = obs_ptrs(obs.as_ptr());
        let mut args = ffi::FhdStepArgs {
            struct_size: std::mem::size_of::<ffi::FhdStepArgs>() as u32,
            num_envs: n as u32,
            obs: obs_f,
            rewards: ptr::null(),
            terminated: ptr::null(),
            truncated: ptr::null(),
            final_obs: ptr::null(),
            actions: actions.as_mut_ptr(),
            stats: &mut stats,
            obs_u8: obs_u,
            final_obs_u8: ptr::null(),
            valid: ptr::null(),
        };
        if let Some(t) = transition {
            Self::len("rewards", t.rewards.len(), n)?;
            Self::len("terminated", t.terminated.len(), n)?;
            Self::len("truncated", t.truncated.len(), n)?;
            if let Some(f) = t.final_obs {
                Self::len("final_obs", f.len(), n * s)?;
                let (ff, fu) = obs_ptrs(f.as_ptr());
                args.final_obs = ff;
                args.final_obs_u8 = fu;
            }
            args.valid = self.valid_ptr(t.valid)?;
            for i in 0..n {
                self.flags[i] = t.terminated[i] as u8;
                self.flags[n + i] = t.truncated[i] as u8;
            }
            args.rewards = t.rewards.as_ptr();
            args.terminated = self.flags.as_ptr();
            args.truncated = self.flags[n..].as_ptr();
        }
        let rc = unsafe { (self.lib.api().step.unwrap())(self.h, &args) };
        self.check(rc)?;
        Ok(stats)
    }

    /// Store N transitions (one per env stream) in replay through the n-step accumulator,
    /// without training (see fhd_transitions); float32 observations.
    pub fn observe(&mut self, t: Transitions) -> Result<(), Error> {
        self.observe_obs(t)
    }

    /// observe for a uint8 learner (ABI minor 1).
    pub fn observe_u8(&mut self, t: Transitions<u8>) -> Result<(), Error> {
        self.observe_obs(t)
    }

    fn observe_obs<T: ObsElem>(&mut self, t: Transitions<T>) -> Result<(), Error> {
        let (n, s, d) = (self.num_envs, self.obs_dim, self.branches.len());
        self.need_minor_1("uint8 observations", T::DTYPE == ObsDtype::U8)?;
        Self::len("obs", t.obs.len(), n * s)?;
        Self::len("actions", t.actions.len(), n * d)?;
        Self::len("rewards", t.rewards.len(), n)?;
        Self::len("next_obs", t.next_obs.len(), n * s)?;
        Self::len("terminated", t.terminated.len(), n)?;
        Self::len("truncated", t.truncated.len(), n)?;
        let valid = self.valid_ptr(t.valid)?;
        for i in 0..n {
            self.flags[i] = t.terminated[i] as u8;
            self.flags[n + i] = t.truncated[i] as u8;
        }
        let (obs_f, obs_u) = obs_ptrs(t.obs.as_ptr());
        let (next_f, next_u) = obs_ptrs(t.next_obs.as_ptr());
        let args = ffi::FhdTransitions {
            struct_size: std::mem::size_of::<ffi::FhdTransitions>() as u32,
            num_envs: n as u32,
            obs: obs_f,
            actions: t.actions.as_ptr(),
            rewards: t.rewards.as_ptr(),
            next_obs: next_f,
            terminated: self.flags.as_ptr(),
            truncated: self.flags[n..].as_ptr(),
            obs_u8: obs_u,
            next_obs_u8: next_u,
            valid,
        };
        let rc = unsafe { (self.lib.api().observe.unwrap())(self.h, &args) };
        self.check(rc)
    }

    /// Actions for `obs` (M, S) into `actions` (M, D): greedy, or epsilon-greedy with the
    /// schedule's epsilon when `explore`. `q_values` optional out (M, KT). float32
    /// observations.
    pub fn act(&mut self, obs: &[f32], explore: bool, actions: &mut [i32],
               q_values: Option<&mut [f32]>) -> Result<(), Error> {
        self.act_obs(obs, explore, actions, q_values)
    }

    /// act for a uint8 learner (ABI minor 1): obs (M, S) bytes.
    pub fn act_u8(&mut self, obs: &[u8], explore: bool, actions: &mut [i32],
                  q_values: Option<&mut [f32]>) -> Result<(), Error> {
        self.act_obs(obs, explore, actions, q_values)
    }

    fn act_obs<T: ObsElem>(&mut self, obs: &[T], explore: bool, actions: &mut [i32],
                           q_values: Option<&mut [f32]>) -> Result<(), Error> {
        let s = self.obs_dim;
        self.need_minor_1("uint8 observations", T::DTYPE == ObsDtype::U8)?;
        if obs.is_empty() || s == 0 || obs.len() % s != 0 {
            return Err(Error::Shape { argument: "obs", expected: s, got: obs.len() });
        }
        let m = obs.len() / s;
        Self::len("actions", actions.len(), m * self.branches.len())?;
        let kt: usize = self.branches.iter().sum();
        let q = match q_values {
            Some(q) => {
                Self::len("q_values", q.len(), m * kt)?;
                q.as_mut_ptr()
            }
            None => ptr::null_mut(),
        };
        let (obs_f, obs_u) = obs_ptrs(obs.as_ptr());
        let args = ffi::FhdActArgs {
            struct_size: std::mem::size_of::<ffi::FhdActArgs>() as u32,
            num_obs: m as u32,
            obs: obs_f,
            actions: actions.as_mut_ptr(),
            q_values: q,
            explore: explore as u32,
            reserved: 0,
            obs_u8: obs_u,
        };
        let rc = unsafe { (self.lib.api().act.unwrap())(self.h, &args) };
        self.check(rc)
    }

    /// `n` gradient updates from replay now.
    pub fn train(&mut self, n: u32) -> Result<TrainStats, Error> {
        let mut stats = TrainStats { struct_size: std::mem::size_of::<TrainStats>() as u32,
                                     ..Default::default() };
        let rc = unsafe { (self.lib.api().train.unwrap())(self.h, n, &mut stats) };
        self.check(rc)?;
        Ok(stats)
    }

    /// The metrics as JSON text.
    pub fn metrics_json(&mut self) -> Result<String, Error> {
        let f = self.lib.api().metrics.unwrap();
        let mut needed = 0usize;
        let rc = unsafe { f(self.h, ptr::null_mut(), 0, &mut needed) };
        if rc != ffi::FHD_OK && rc != ffi::FHD_ERR_BUFFER_TOO_SMALL {
            return Err(self.fail(rc));
        }
        for _ in 0..16 {
            let mut buf = vec![0u8; needed + 64];
            let rc = unsafe { f(self.h, buf.as_mut_ptr() as *mut c_char, buf.len(), &mut needed) };
            if rc == ffi::FHD_OK {
                let end = buf.iter().position(|b| *b == 0).unwrap_or(buf.len());
                return Ok(String::from_utf8_lossy(&buf[..end]).into_owned());
            }
            if rc != ffi::FHD_ERR_BUFFER_TOO_SMALL {
                return Err(self.fail(rc));
            }
        }
        Err(self.fail(ffi::FHD_ERR_BUFFER_TOO_SMALL))
    }

    /// The metrics, parsed: metrics()?.get("env_steps").
    pub fn metrics(&mut self) -> Result<Value, Error> {
        let text = self.metrics_json()?;
        json::parse(&text).map_err(|(at, what)| Error::Status {
            code: ffi::FHD_ERR_INTERNAL,
            name: "FHD_ERR_INTERNAL".into(),
            message: format!("metrics JSON at byte {}: {}", at, what),
        })
    }

    fn path_arg(path: &Path) -> Result<CString, Error> {
        CString::new(path.as_os_str().to_string_lossy().as_bytes())
            .map_err(|_| Error::InvalidString { argument: "path" })
    }

    /// Write a checkpoint (safetensors, atomically); include_replay for an exact resume.
    pub fn save(&mut self, path: &Path, include_replay: bool) -> Result<(), Error> {
        let p = Self::path_arg(path)?;
        let flags = if include_replay { ffi::FHD_CKPT_INCLUDE_REPLAY } else { 0 };
        let rc = unsafe { (self.lib.api().checkpoint_save.unwrap())(self.h, p.as_ptr(), flags) };
        self.check(rc)
    }

    /// Load a checkpoint (validated first; the learner is unchanged on failure).
    pub fn load(&mut self, path: &Path, include_replay: bool) -> Result<(), Error> {
        let p = Self::path_arg(path)?;
        let flags = if include_replay { ffi::FHD_CKPT_INCLUDE_REPLAY } else { 0 };
        let rc = unsafe { (self.lib.api().checkpoint_load.unwrap())(self.h, p.as_ptr(), flags) };
        self.check(rc)
    }

    /// A copy of state tensor `name` ("online.torso.0.weight").
    pub fn tensor(&mut self, name: &str) -> Result<Vec<f32>, Error> {
        let api = self.lib.api();
        let mut info = ffi::FhdTensorInfo { struct_size: std::mem::size_of::<ffi::FhdTensorInfo>()
                                                as u32,
                                            rank: 0, shape: [0; 4], count: 0, name: [0; 96] };
        let c = CString::new(name).map_err(|_| Error::InvalidString { argument: "name" })?;
        for i in 0.. {
            let rc = unsafe { (api.tensor_info.unwrap())(self.h, i, &mut info) };
            if rc == ffi::FHD_ERR_NOT_FOUND {
                break;
            }
            self.check(rc)?;
            if carray(&info.name) == name {
                let mut v = vec![0f32; info.count as usize];
                let rc = unsafe {
                    (api.tensor_read.unwrap())(self.h, c.as_ptr(), v.as_mut_ptr(), info.count)
                };
                self.check(rc)?;
                return Ok(v);
            }
        }
        let rc = unsafe { (api.tensor_read.unwrap())(self.h, c.as_ptr(), ptr::null_mut(), 0) };
        Err(self.fail(if rc == ffi::FHD_OK { ffi::FHD_ERR_NOT_FOUND } else { rc }))
    }
}

impl Drop for Learner {
    fn drop(&mut self) {
        unsafe { (self.lib.api().destroy.unwrap())(self.h) };
    }
}
