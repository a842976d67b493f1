//! Loading libfoxhunt_dqn.so: the path rule (argument, else $FOXHUNT_DQN_LIBRARY, else the
//! loader's search path), dlopen/dlsym of the entry symbol, ABI major 1 negotiation, and the
//! copy of the v1 table up to its struct_size (members past it None, as FHD_API_HAS says).

use std::ffi::{CStr, CString};
use std::os::raw::c_char;
use std::path::{Path, PathBuf};
use std::ptr;
use std::sync::Arc;

use crate::error::Error;
use crate::ffi;

pub const LIBRARY_ENV: &str = "FOXHUNT_DQN_LIBRARY";
pub const LIBRARY_NAME: &str = "libfoxhunt_dqn.so";

pub(crate) fn cstr(p: *const c_char) -> String {
    if p.is_null() {
        return String::new();
    }
    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
}

pub(crate) fn carray(a: &[c_char]) -> String {
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

    pub(crate) fn api(&self) -> &ffi::FhdApiV1 {
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
