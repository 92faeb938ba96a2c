//! A CUDA program tests drive line by line (`tests/fixtures/driver-trace/
//! cuda_program.py`, Python `ctypes` against the fake library): each call
//! it makes is one the test asked for, so the test knows exactly what the
//! driver was asked and answered. Used by the driver-trace tests, which
//! watch those calls from outside the process through uprobes.

use std::io::{BufRead as _, BufReader, Write as _};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};

/// The program's path in the workspace.
pub fn script() -> PathBuf {
    crate::harness::workspace_root().join("tests/fixtures/driver-trace/cuda_program.py")
}

/// Whether `python3` can run the program here.
pub fn available() -> bool {
    Command::new("python3")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|status| status.success())
}

/// A running program; killed on drop.
pub struct CudaProgram {
    pub pid: u32,
    child: Child,
    input: ChildStdin,
    output: BufReader<ChildStdout>,
}

impl CudaProgram {
    /// Starts the program with `FAKE_CUDA_SCENARIO=scenario`; it loads no
    /// library until told to (`load`).
    pub fn start(scenario: &Path) -> Result<CudaProgram, String> {
        let mut child = Command::new("python3")
            .arg(script())
            .env(crate::harness::SCENARIO_ENV, scenario)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .map_err(|e| format!("cannot start python3: {e}"))?;
        let input = child.stdin.take().ok_or("no stdin")?;
        let output = BufReader::new(child.stdout.take().ok_or("no stdout")?);
        let mut program = CudaProgram { pid: child.id(), child, input, output };
        let ready = program.read_line()?;
        if ready != format!("ready {}", program.pid) {
            return Err(format!("unexpected first line {ready:?}"));
        }
        Ok(program)
    }

    /// Sends one command and returns its answer (`ok`, `ok 123`, `err 2`).
    pub fn call(&mut self, command: &str) -> Result<String, String> {
        writeln!(self.input, "{command}").map_err(|e| format!("{command}: {e}"))?;
        self.input.flush().map_err(|e| format!("{command}: {e}"))?;
        self.read_line()
    }

    /// Loads `library` and initialises it, with no context yet (a program
    /// that picks its own contexts).
    pub fn load(&mut self, library: &Path) -> Result<(), String> {
        self.expect_ok(&[format!("load {}", library.display()), "init".into()])
    }

    /// Loads `library`, initialises it and creates a context on device 0.
    pub fn open(&mut self, library: &Path) -> Result<(), String> {
        self.load(library)?;
        self.expect_ok(&["context 0".into()])
    }

    fn expect_ok(&mut self, commands: &[String]) -> Result<(), String> {
        for command in commands {
            let answer = self.call(command)?;
            if answer != "ok" {
                return Err(format!("{command}: {answer}"));
            }
        }
        Ok(())
    }

    /// An allocating command's result: `Ok(address)` or `Err(CUresult)`.
    pub fn allocate(&mut self, command: &str) -> Result<Result<u64, i32>, String> {
        let answer = self.call(command)?;
        let parse = |text: &str| text.parse().map_err(|_| format!("{command}: {answer:?}"));
        match answer.split_once(' ') {
            Some(("ok", address)) => Ok(Ok(parse(address)?)),
            Some(("err", code)) => Ok(Err(parse(code)? as i32)),
            _ => Err(format!("{command}: {answer:?}")),
        }
    }

    fn read_line(&mut self) -> Result<String, String> {
        let mut line = String::new();
        match self.output.read_line(&mut line) {
            Ok(0) => Err("the program exited".into()),
            Ok(_) => Ok(line.trim_end().to_owned()),
            Err(error) => Err(error.to_string()),
        }
    }
}

impl Drop for CudaProgram {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
