//! foxhunt-dqn from Rust: load libfoxhunt_dqn.so with dlopen, negotiate ABI major 1 and drive
//! a learner through a safe wrapper.
//!
//! ```no_run
//! use foxhunt_dqn::{Learner, Transition};
//! let mut learner = Learner::new(r#"{"obs_dim": 4, "actions": [2], "hidden": [64, 64]}"#)?;
//! let mut actions = [0i32; 1];
//! learner.step(&[0.0, 0.1, 0.0, -0.1], None, &mut actions)?;           // first call
//! let t = Transition { rewards: &[1.0], terminated: &[false], truncated: &[false],
//!                      final_obs: None };
//! learner.step(&[0.0, 0.2, 0.0, -0.2], Some(t), &mut actions)?;        // every later call
//! # Ok::<(), foxhunt_dqn::Error>(())
//! ```
//!
//! The library is `Library::open(path)`'s file (or directory holding libfoxhunt_dqn.so), else
//! `$FOXHUNT_DQN_LIBRARY` (the same), else `libfoxhunt_dqn.so` on the loader's search path.
//! Shapes: N = num_envs (or observations in an act call), S = obs_dim, D = branches,
//! KT = sum of the branches' actions; every slice is row-major.
//!
//! Threading: a Learner is Send (one thread at a time, as the ABI's [learner] rule says, is
//! what &mut self gives); it is not Sync. Libraries are shared through Arc.

pub mod cartpole;
pub mod ffi;
pub mod json;

use std::ffi::{CStr, CString};
use std::fmt;
use std::os::raw::c_char;
use std::path::{Path, PathBuf};
use std::ptr;
use std::sync::Arc;

pub use json::Value;

pub const LIBRARY_ENV: &str = "FOXHUNT_DQN_LIBRARY";
pub const LIBRARY_NAME: &str = "libfoxhunt_dqn.so";

/// Everything that can fail. Library statuses carry the status name ("FHD_ERR_CONFIG_RANGE"),
/// the library's message and, for config errors, the JSON path of the offending field.
#[derive(Clone, Debug, PartialEq)]
pub enum Error {
    /// No library at the given path, in $FOXHUNT_DQN_LIBRARY, or on the search path.
    LibraryNotFound { message: String },
    /// dlopen / dlsym failed, or the library does not provide ABI major 1.
    Load { message: String },
    /// init rejected the config: code, name, JSON path ("$.hidden[1]"), line/column of a
    /// syntax error (else 0), message with the allowed range.
    Config { code: i32, name: String, path: String, line: i32, column: i32, message: String },
    /// A call on a learner failed with a library status (the learner is unchanged).
    Status { code: i32, name: String, message: String },
    /// A slice of the wrong length, found before the library was called.
    Shape { argument: &'static str, expected: usize, got: usize },
    /// A path or text with an interior NUL byte.
    InvalidString { argument: &'static str },
}

impl Error {
    /// The JSON path of a config error ("" for others).
    pub fn path(&self) -> &str {
        match self {
            Error::Config { path, .. } => path,
            _ => "",
        }
    }
    /// The library's status code (None for errors found on the Rust side).
    pub fn code(&self) -> Option<i32> {
        match self {
            Error::Config { code, .. } | Error::Status { code, .. } => Some(*code),
            _ => None,
        }
    }
    pub fn message(&self) -> String {
        match self {
            Error::LibraryNotFound { message } | Error::Load { message } => message.clone(),
            Error::Config { message, .. } | Error::Status { message, .. } => message.clone(),
            Error::Shape { argument, expected, got } => {
                format!("{}: expected {} values, got {}", argument, expected, got)
            }
            Error::InvalidString { argument } => format!("{}: contains a NUL byte", argument),
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Config { name, path, line, column, message, .. } => {
                write!(f, "{}", name)?;
                if !path.is_empty() {
                    write!(f, " at {}", path)?;
                }
                if *line > 0 {
                    write!(f, " (line {}, column {})", line, column)?;
                }
                write!(f, ": {}", message)
            }
            Error::Status { name, message, .. } => write!(f, "{}: {}", name, message),
            _ => write!(f, "{}", self.message()),
        }
    }
}

impl std::error::Error for Error {}

fn cstr(p: *const c_char) -> String {
    if p.is_null() {
        return String::new();
    }
    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
}

fn carray(a: &[c_char]) -> String {
    let bytes: Vec<u8> = a.iter().take_while(|c| **c != 0).map(|c| *c as u8).collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

fn dlerror_text() -> String {
    cstr(unsafe { ffi::dlerror() })
}

/// One loaded libfoxhunt_dqn.so and its v1 table. Closed (dlclose) when the last Arc goes.
pub struct Library {
    handle: *mut std::os::raw::c_void,
    /// a copy of the library's table: the bytes inside its struct_size, the members past it
    /// None (so a member is Some exactly when FHD_API_HAS says it exists)
    api: ffi::FhdApiV1,
    /// the table's struct_size (bytes of it this host reads)
    pub table_size: usize,
    pub path: PathBuf,
    pub version: String,
    pub abi_minor: u32,
}

// The table and the handle are immutable after open; the library's table functions are
// [thread-safe] or take a learner, which Learner serialises.
unsafe impl Send for Library {}
unsafe impl Sync for Library {}

impl Library {
    /// Load the library: `path` (file or directory), else $FOXHUNT_DQN_LIBRARY (file or
    /// directory), else libfoxhunt_dqn.so through the loader's search path.
    pub fn open(path: Option<&Path>) -> Result<Arc<Library>, Error> {
        Library::open_with_table_size(path, usize::MAX)
    }

    /// Library::open, reading at most `table_size` bytes of the table: the library then looks
    /// like one of an older minor (FHD_API_V1_SIZE_MINOR_0 for minor 0). For tests of the
    /// FHD_API_HAS gating.
    #[doc(hidden)]
    pub fn open_with_table_size(path: Option<&Path>, table_size: usize)
                                -> Result<Arc<Library>, Error> {
        let (file, named) = match path {
            Some(p) => (resolve(p, "library path")?, true),
            None => match std::env::var_os(LIBRARY_ENV) {
                Some(v) if !v.is_empty() => {
                    (resolve(Path::new(&v), &format!("{}={:?}", LIBRARY_ENV, v))?, true)
                }
                _ => (PathBuf::from(LIBRARY_NAME), false),
            },
        };
        let c = CString::new(file.as_os_str().to_string_lossy().as_bytes())
            .map_err(|_| Error::InvalidString { argument: "library path" })?;
        let handle = unsafe { ffi::dlopen(c.as_ptr(), ffi::RTLD_NOW | ffi::RTLD_LOCAL) };
        if handle.is_null() {
            let why = dlerror_text();
            return Err(if named {
                Error::Load { message: format!("cannot load {:?}: {}", file, why) }
            } else {
                Error::LibraryNotFound {
                    message: format!("{} not found (pass a path or set {}): {}", LIBRARY_NAME,
                                     LIBRARY_ENV, why),
                }
            });
        }
        // the table members are Option<fn> and u32: all zeros is a valid value (None, 0)
        let mut lib = Library { handle, api: unsafe { std::mem::zeroed() }, table_size: 0,
                                path: file, version: String::new(), abi_minor: 0 };
        let sym = unsafe { ffi::dlsym(handle, ffi::FHD_ENTRY_SYMBOL.as_ptr() as *const c_char) };
        if sym.is_null() {
            return Err(Error::Load {
                message: format!("{:?} does not export fhd_get_api_base; is it libfoxhunt_dqn?",
                                 lib.path),
            });
        }
        let entry: ffi::GetApiBaseFn = unsafe { std::mem::transmute(sym) };
        let base = unsafe { entry() };
        if base.is_null() {
            return Err(Error::Load { message: "fhd_get_api_base returned NULL".into() });
        }
        let base = unsafe { &*base };
        if (base.struct_size as usize) < std::mem::size_of::<ffi::FhdApiBase>() {
            return Err(Error::Load {
                message: format!("fhd_api_base.struct_size is {}", base.struct_size),
            });
        }
        lib.version = cstr(base.version);
        let get_api = base.get_api.ok_or(Error::Load { message: "get_api is NULL".into() })?;
        let mut err = ffi::FhdError::new();
        let api = unsafe { get_api(ffi::FHD_ABI_MAJOR, &mut err) } as *const ffi::FhdApiV1;
        if api.is_null() {
            return Err(Error::Load {
                message: format!("{:?} (version {}, newest ABI major {}) does not provide ABI \
                                  major 1: {}", lib.path, lib.version, base.abi_major,
                                 carray(&err.message)),
            });
        }
        // only the header fields are read before the size is known
        let (major, minor, size) =
            unsafe { ((*api).abi_major, (*api).abi_minor, (*api).struct_size as usize) };
        let need = ffi::member_end(144); // tensor_write, the last member of minor 0
        if major != ffi::FHD_ABI_MAJOR || size < need {
            return Err(Error::Load {
                message: format!("the table is ABI major {} of {} bytes; this host needs major 1 \
                                  of at least {}", major, size, need),
            });
        }
        let size = size.min(std::mem::size_of::<ffi::FhdApiV1>()).min(table_size.max(need));
        unsafe {
            ptr::copy_nonoverlapping(api as *const u8, &mut lib.api as *mut ffi::FhdApiV1 as *mut u8,
                                     size)
        };
        lib.api.struct_size = size as u32;
        lib.table_size = size;
        lib.abi_minor = if lib.api.obs_info.is_none() { 0 } else { minor };
        Ok(Arc::new(lib))
    }

    fn api(&self) -> &ffi::FhdApiV1 {
        &self.api
    }

    /// FHD_API_HAS(api, obs_info): the library has obs_info and reads the minor-1 fields
    /// (uint8 observations, valid masks) of the argument structs.
    pub fn has_minor_1(&self) -> bool {
        self.api.obs_info.is_some()
    }

    /// manifest.json of the library (static text).
    pub fn manifest(&self) -> String {
        cstr(unsafe { (self.api().manifest.unwrap())() })
    }

    /// "FHD_ERR_CONFIG_RANGE" for -7.
    pub fn status_name(&self, code: i32) -> String {
        cstr(unsafe { (self.api().status_name.unwrap())(code) })
    }
}

impl Drop for Library {
    fn drop(&mut self) {
        unsafe { ffi::dlclose(self.handle) };
    }
}

fn resolve(p: &Path, what: &str) -> Result<PathBuf, Error> {
    let f = if p.is_dir() { p.join(LIBRARY_NAME) } else { p.to_path_buf() };
    if !f.is_file() {
        return Err(Error::LibraryNotFound { message: format!("{} {:?}: no such file", what, f) });
    }
    Ok(f)
}

/// The training done by one call (all zero when it did no update).
pub type TrainStats = ffi::FhdTrainStats;

/// What the envs returned for the previous actions (each of length N).
#[derive(Clone, Copy, Debug)]
pub struct Transition<'a> {
    pub rewards: &'a [f32],
    pub terminated: &'a [bool],
    pub truncated: &'a [bool],
    /// optional (N, S): the true last observation of envs whose episode ended (auto-reset)
    pub final_obs: Option<&'a [f32]>,
}

/// A learner created from a JSON config; destroyed on Drop.
pub struct Learner {
    lib: Arc<Library>,
    h: *mut ffi::FhdLearner,
    obs_dim: usize,
    num_envs: usize,
    branches: Vec<usize>,
    flags: Vec<u8>, // (2N) terminated then truncated, as 0/1 bytes
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
        // the library accepted it, so it is valid JSON with obs_dim and actions
        let cfg = json::parse(config_json).unwrap_or(Value::Null);
        let obs_dim = cfg.get("obs_dim").and_then(Value::as_u64).unwrap_or(0) as usize;
        let num_envs = cfg.get("num_envs").and_then(Value::as_u64).unwrap_or(1) as usize;
        let branches: Vec<usize> = cfg.get("actions").and_then(Value::as_array)
            .map(|a| a.iter().filter_map(Value::as_u64).map(|k| k as usize).collect())
            .unwrap_or_default();
        Ok(Learner { lib, h, obs_dim, num_envs, branches, flags: vec![0; 2 * num_envs] })
    }

    pub fn obs_dim(&self) -> usize {
        self.obs_dim
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

    /// The agent loop for the N envs (see fhd_step_args): obs (N, S); `transition` None on
    /// the first call (only actions are chosen), else what the envs returned for the previous
    /// actions; actions out (N, D). Returns the training the call did.
    pub fn step(&mut self, obs: &[f32], transition: Option<Transition>, actions: &mut [i32])
                -> Result<TrainStats, Error> {
        let (n, s, d) = (self.num_envs, self.obs_dim, self.branches.len());
        Self::len("obs", obs.len(), n * s)?;
        Self::len("actions", actions.len(), n * d)?;
        let mut stats = TrainStats { struct_size: std::mem::size_of::<TrainStats>() as u32,
                                     ..Default::default() };
        let mut args = ffi::FhdStepArgs {
            struct_size: std::mem::size_of::<ffi::FhdStepArgs>() as u32,
            num_envs: n as u32,
            obs: obs.as_ptr(),
            rewards: ptr::null(),
            terminated: ptr::null(),
            truncated: ptr::null(),
            final_obs: ptr::null(),
            actions: actions.as_mut_ptr(),
            stats: &mut stats,
            obs_u8: ptr::null(),
            final_obs_u8: ptr::null(),
            valid: ptr::null(),
        };
        if let Some(t) = transition {
            Self::len("rewards", t.rewards.len(), n)?;
            Self::len("terminated", t.terminated.len(), n)?;
            Self::len("truncated", t.truncated.len(), n)?;
            if let Some(f) = t.final_obs {
                Self::len("final_obs", f.len(), n * s)?;
                args.final_obs = f.as_ptr();
            }
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

    /// Actions for `obs` (M, S) into `actions` (M, D): greedy, or epsilon-greedy with the
    /// schedule's epsilon when `explore`. `q_values` optional out (M, KT).
    pub fn act(&mut self, obs: &[f32], explore: bool, actions: &mut [i32],
               q_values: Option<&mut [f32]>) -> Result<(), Error> {
        let s = self.obs_dim;
        if obs.is_empty() || obs.len() % s != 0 {
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
        let args = ffi::FhdActArgs {
            struct_size: std::mem::size_of::<ffi::FhdActArgs>() as u32,
            num_obs: m as u32,
            obs: obs.as_ptr(),
            actions: actions.as_mut_ptr(),
            q_values: q,
            explore: explore as u32,
            reserved: 0,
            obs_u8: ptr::null(),
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
