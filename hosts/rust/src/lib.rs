//! foxhunt-dqn from Rust: load libfoxhunt_dqn.so with dlopen, negotiate ABI major 1 and drive
//! a learner through a safe wrapper.
//!
//! ```no_run
//! use foxhunt_dqn::{Learner, Transition};
//! let mut learner = Learner::new(r#"{"obs_dim": 4, "actions": [2], "hidden": [64, 64]}"#)?;
//! let mut actions = [0i32; 1];
//! learner.step(&[0.0, 0.1, 0.0, -0.1], None, &mut actions)?;           // first call
//! let t = Transition { rewards: &[1.0], terminated: &[false], truncated: &[false],
//!                      final_obs: None, valid: None };
//! learner.step(&[0.0, 0.2, 0.0, -0.2], Some(t), &mut actions)?;        // every later call
//! # Ok::<(), foxhunt_dqn::Error>(())
//! ```
//!
//! The library is `Library::open(path)`'s file (or directory holding libfoxhunt_dqn.so), else
//! `$FOXHUNT_DQN_LIBRARY` (the same), else `libfoxhunt_dqn.so` on the loader's search path.
//! Shapes: N = num_envs (or observations in an act call), S = values per observation (obs_dim,
//! or C*H*W of obs_shape), D = branches, KT = sum of the branches' actions; every slice is
//! row-major. float32 learners take f32 slices (step, act, observe), uint8 learners (obs_dtype
//! "uint8", ABI minor 1) u8 slices (step_u8, act_u8, observe_u8).
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

pub use ffi::Status;
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
    /// The call needs a newer ABI minor than the library's table provides (uint8
    /// observations and valid masks need minor 1: FHD_API_HAS(api, obs_info)).
    Unsupported { feature: &'static str, abi_minor: u32 },
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
    /// The library's status (None for errors found on the Rust side).
    pub fn status(&self) -> Option<Status> {
        self.code().and_then(Status::from_code)
    }
    pub fn message(&self) -> String {
        match self {
            Error::LibraryNotFound { message } | Error::Load { message } => message.clone(),
            Error::Config { message, .. } | Error::Status { message, .. } => message.clone(),
            Error::Shape { argument, expected, got } => {
                format!("{}: expected {} values, got {}", argument, expected, got)
            }
            Error::InvalidString { argument } => format!("{}: contains a NUL byte", argument),
            Error::Unsupported { feature, abi_minor } => {
                format!("{}: needs ABI minor 1 (obs_info); the library's table is minor {}",
                        feature, abi_minor)
            }
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
    /// bytes of the table this host reads: its struct_size, at most the minor-1 table's 160
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
        let dst = &mut lib.api as *mut ffi::FhdApiV1 as *mut u8;
        unsafe { ptr::copy_nonoverlapping(api as *const u8, dst, size) };
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

/// The element type of a learner's observations (config obs_dtype).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ObsDtype {
    /// "float32": the f32 calls (step, act, observe)
    F32,
    /// "uint8": the u8 calls (step_u8, act_u8, observe_u8); ABI minor 1
    U8,
}

/// An observation element the ABI carries: f32 or u8 (sealed).
pub trait ObsElem: Copy + sealed::Sealed {
    const DTYPE: ObsDtype;
}
impl ObsElem for f32 {
    const DTYPE: ObsDtype = ObsDtype::F32;
}
impl ObsElem for u8 {
    const DTYPE: ObsDtype = ObsDtype::U8;
}
mod sealed {
    pub trait Sealed {}
    impl Sealed for f32 {}
    impl Sealed for u8 {}
}

/// The pointer pair (float, uint8) of one observation argument: exactly one is not NULL.
fn obs_ptrs<T: ObsElem>(p: *const T) -> (*const f32, *const u8) {
    match T::DTYPE {
        ObsDtype::F32 => (p as *const f32, ptr::null()),
        ObsDtype::U8 => (ptr::null(), p as *const u8),
    }
}

/// The learner's observations, as obs_info reports them (fhd_obs_info).
#[derive(Clone, Debug, PartialEq)]
pub struct ObsInfo {
    pub dtype: ObsDtype,
    /// [S] (flat) or [C, H, W] (image, channel first)
    pub shape: Vec<usize>,
    /// S = values per observation
    pub size: usize,
    /// frames stacked along C by the host (1: none)
    pub frame_stack: usize,
    /// the network's input is scale * obs
    pub scale: f32,
}

/// What the envs returned for the previous actions (each of length N). `T` is the
/// observation element: f32 for step, u8 for step_u8.
#[derive(Clone, Copy, Debug)]
pub struct Transition<'a, T = f32> {
    pub rewards: &'a [f32],
    pub terminated: &'a [bool],
    pub truncated: &'a [bool],
    /// optional (N, S): the true last observation of envs whose episode ended (auto-reset)
    pub final_obs: Option<&'a [T]>,
    /// optional (N), ABI minor 1: env i stores a transition only where valid[i] (it still gets
    /// an action); false on the call whose obs[i] is a NEXT_STEP autoreset's reset observation
    pub valid: Option<&'a [bool]>,
}

/// N one-step transitions for observe, one per env stream. `T`: f32 (observe) or u8
/// (observe_u8).
#[derive(Clone, Copy, Debug)]
pub struct Transitions<'a, T = f32> {
    /// (N, S) s_t
    pub obs: &'a [T],
    /// (N, D) a_t
    pub actions: &'a [i32],
    /// (N) r_{t+1}
    pub rewards: &'a [f32],
    /// (N, S) s_{t+1}: the true final observation when an episode ends
    pub next_obs: &'a [T],
    pub terminated: &'a [bool],
    pub truncated: &'a [bool],
    /// optional (N), ABI minor 1: env i is stored only where valid[i]; None: every env
    pub valid: Option<&'a [bool]>,
}

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
