//! The seccomp filter: a classic BPF program made from the system-call
//! table ([`super::table`]) that traps (`SECCOMP_RET_TRAP`, SIGSYS) exactly
//! the calls that hand the kernel memory in zpage's far range.
//!
//! A filter sees a call's number, its architecture, the address it is made
//! from and its six arguments as numbers, never the memory behind them. So:
//!
//! 1. calls made from zpage's trampoline (the one `syscall` instruction at
//!    a fixed address, `zpage_region::far::TRAMPOLINE_SYSCALL_END`) pass: they are
//!    zpage re-issuing a trapped call with its memory pinned, or its own;
//! 2. other architectures (32-bit `int 0x80`) and x32 numbers pass: their
//!    pointers cannot reach the far range;
//! 3. the call's number selects its rule, by binary search over runs of
//!    numbers with the same rule (about nine comparisons):
//!    - `Check`: each argument the table marks as a pointer is compared with
//!      the far range (its high word shifted: one load, one shift, one
//!      compare); a match traps, otherwise the call passes;
//!    - `Always` traps, `Never` passes, `Errno` fails the call;
//!    - `futex` passes `FUTEX_WAKE` on a private futex (it reads no memory,
//!      and every contended unlock makes one), and checks the rest.
//!
//! Traps carry [`TRAP_MARKER`] as their data (the handler's `si_errno`), so
//! the handler tells its own traps from a program's own filter's.
//!
//! The program is checked by the kernel when installed; the tests run it in
//! a small interpreter against the table.

use super::table::{self, Call, Filter};
use zpage_region::far;

/// `SECCOMP_RET_DATA` of zpage's traps ("zp").
pub const TRAP_MARKER: u32 = 0x7a70;

const AUDIT_ARCH_X86_64: u32 = 0xc000_003e;
const SECCOMP_RET_ALLOW: u32 = 0x7fff_0000;
const SECCOMP_RET_TRAP: u32 = 0x0003_0000;
const SECCOMP_RET_ERRNO: u32 = 0x0005_0000;

const LD_W_ABS: u16 = 0x20;
const JEQ_K: u16 = 0x15;
const JGE_K: u16 = 0x35;
const JA: u16 = 0x05;
const RET_K: u16 = 0x06;
const RSH_K: u16 = 0x74;
const AND_K: u16 = 0x54;

/// Offsets in `struct seccomp_data`.
const OFF_NR: u32 = 0;
const OFF_ARCH: u32 = 4;
const OFF_IP: u32 = 8;
const fn off_arg_hi(i: usize) -> u32 {
    16 + 8 * i as u32 + 4
}
const fn off_arg_lo(i: usize) -> u32 {
    16 + 8 * i as u32
}

/// x32 system calls have this bit set in their number.
const X32_SYSCALL_BIT: u32 = 0x4000_0000;
/// `FUTEX_WAKE | FUTEX_PRIVATE_FLAG` and `FUTEX_WAKE_BITSET | FUTEX_PRIVATE_FLAG`.
const FUTEX_PRIVATE_WAKES: [u32; 2] = [0x81, 0x8a];
/// Which futex arguments point to memory, by operation (`op & 0x7f`): the
/// word always; the timeout (argument 3) for the waiting ones; the second
/// word (argument 4) for the requeueing ones. The other arguments are
/// numbers, or registers a caller of `syscall()` left as they were: compared,
/// they would trap calls that name no region memory.
const FUTEX_POINTERS: [(&[u32], u8); 3] = [
    // FUTEX_WAIT, FUTEX_LOCK_PI, FUTEX_WAIT_BITSET, FUTEX_LOCK_PI2.
    (&[0, 6, 9, 13], 0b01001),
    // FUTEX_REQUEUE, FUTEX_CMP_REQUEUE, FUTEX_WAKE_OP, FUTEX_CMP_REQUEUE_PI.
    (&[3, 4, 5, 12], 0b10001),
    // FUTEX_WAIT_REQUEUE_PI.
    (&[11], 0b11001),
];

/// One BPF instruction (`struct sock_filter`).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Insn {
    pub code: u16,
    pub jt: u8,
    pub jf: u8,
    pub k: u32,
}

const fn insn(code: u16, jt: u8, jf: u8, k: u32) -> Insn {
    Insn { code, jt, jf, k }
}

/// What a run of call numbers does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Rule {
    Allow,
    Trap,
    Errno(i32),
    /// Trap if one of the arguments in the mask is in the far range.
    Check(u8),
    /// `Check(FUTEX_POINTERS)`, private wakes excepted.
    Futex,
}

fn rule_of(call: &Call) -> Rule {
    match call.filter {
        Filter::Never => Rule::Allow,
        Filter::Always => Rule::Trap,
        Filter::Errno(e) => Rule::Errno(e),
        Filter::Own => {
            debug_assert_eq!(call.nr, libc::SYS_futex as u32);
            Rule::Futex
        }
        Filter::Check => match table::pointer_mask(call) {
            0 => Rule::Allow,
            mask => Rule::Check(mask),
        },
    }
}

/// Highest call number the tree covers one by one; above it (and in the
/// gaps of the table) every argument is checked.
const MAX_NR: u32 = 1023;

/// Runs of consecutive numbers `[start, next run's start)` with one rule.
fn runs() -> Vec<(u32, Rule)> {
    let unknown = rule_of(&table::UNKNOWN);
    let mut runs: Vec<(u32, Rule)> = Vec::new();
    for nr in 0..=MAX_NR + 1 {
        let rule = if nr > MAX_NR {
            unknown
        } else {
            rule_of(table::lookup(nr))
        };
        if runs.last().map(|&(_, r)| r) != Some(rule) {
            runs.push((nr, rule));
        }
    }
    runs
}

/// A program being assembled: jumps to labels are fixed up at the end.
struct Asm {
    code: Vec<Insn>,
    /// (instruction index of a `ja`, label) to patch.
    fixups: Vec<(usize, usize)>,
    labels: Vec<Option<usize>>,
}

impl Asm {
    fn label(&mut self) -> usize {
        self.labels.push(None);
        self.labels.len() - 1
    }
    fn bind(&mut self, label: usize) {
        self.labels[label] = Some(self.code.len());
    }
    fn push(&mut self, i: Insn) {
        self.code.push(i);
    }
    /// An unconditional jump to a label (32-bit offset: any distance).
    fn ja(&mut self, label: usize) {
        self.fixups.push((self.code.len(), label));
        self.code.push(insn(JA, 0, 0, 0));
    }
    fn finish(mut self) -> Vec<Insn> {
        for (at, label) in self.fixups {
            let target = self.labels[label].expect("every label is bound");
            self.code[at].k = (target - at - 1) as u32;
        }
        self.code
    }
}

/// The trapping test of one argument: falls through if it is not in the
/// far range, jumps to `trap` if it is.
fn check_arg(asm: &mut Asm, i: usize, trap: usize) {
    asm.push(insn(LD_W_ABS, 0, 0, off_arg_hi(i)));
    asm.push(insn(RSH_K, 0, 0, far::FAR_SHIFT - 32));
    // Equal: to the next instruction (a jump to the trap); else skip it.
    asm.push(insn(JEQ_K, 0, 1, (far::FAR_BASE >> far::FAR_SHIFT) as u32));
    asm.ja(trap);
}

/// The whole filter, `trampoline_ip` being the address right after the
/// trampoline's `syscall` instruction.
pub fn program(trampoline_ip: u64) -> Vec<Insn> {
    let mut asm = Asm {
        code: Vec::new(),
        fixups: Vec::new(),
        labels: Vec::new(),
    };
    let allow = asm.label();
    let trap = asm.label();
    // Other architectures pass.
    asm.push(insn(LD_W_ABS, 0, 0, OFF_ARCH));
    asm.push(insn(JEQ_K, 1, 0, AUDIT_ARCH_X86_64));
    asm.ja(allow);
    // The trampoline passes.
    asm.push(insn(LD_W_ABS, 0, 0, OFF_IP));
    asm.push(insn(JEQ_K, 0, 3, trampoline_ip as u32));
    asm.push(insn(LD_W_ABS, 0, 0, OFF_IP + 4));
    asm.push(insn(JEQ_K, 0, 1, (trampoline_ip >> 32) as u32));
    asm.ja(allow);
    // x32 numbers pass.
    asm.push(insn(LD_W_ABS, 0, 0, OFF_NR));
    asm.push(insn(JGE_K, 0, 1, X32_SYSCALL_BIT));
    asm.ja(allow);

    let runs = runs();
    // One block per distinct rule, shared by the runs that have it.
    let mut rules: Vec<Rule> = Vec::new();
    for &(_, r) in &runs {
        if !rules.contains(&r) {
            rules.push(r);
        }
    }
    let blocks: Vec<usize> = rules.iter().map(|_| asm.label()).collect();
    let block_of = |r: Rule| blocks[rules.iter().position(|&x| x == r).unwrap()];

    // The binary search over runs (the number stays in the accumulator).
    fn tree(asm: &mut Asm, runs: &[(u32, Rule)], block_of: &dyn Fn(Rule) -> usize) {
        if runs.len() == 1 {
            asm.ja(block_of(runs[0].1));
            return;
        }
        let mid = runs.len() / 2;
        let right = asm.label();
        // nr >= start of the middle run: the right half.
        asm.push(insn(JGE_K, 0, 1, runs[mid].0));
        asm.ja(right);
        tree(asm, &runs[..mid], block_of);
        asm.bind(right);
        tree(asm, &runs[mid..], block_of);
    }
    tree(&mut asm, &runs, &block_of);

    for (rule, &label) in rules.iter().zip(&blocks) {
        asm.bind(label);
        match *rule {
            Rule::Allow => asm.ja(allow),
            Rule::Trap => asm.ja(trap),
            Rule::Errno(e) => asm.push(insn(RET_K, 0, 0, SECCOMP_RET_ERRNO | e as u32)),
            Rule::Check(mask) => {
                for i in (0..6).filter(|i| mask & (1 << i) != 0) {
                    check_arg(&mut asm, i, trap);
                }
                asm.ja(allow);
            }
            Rule::Futex => {
                asm.push(insn(LD_W_ABS, 0, 0, off_arg_lo(1)));
                // The clock flag (bit 8) does not change what is read.
                asm.push(insn(AND_K, 0, 0, 0xff));
                for wake in FUTEX_PRIVATE_WAKES {
                    asm.push(insn(JEQ_K, 0, 1, wake));
                    asm.ja(allow);
                }
                asm.push(insn(AND_K, 0, 0, 0x7f));
                let groups: Vec<usize> = FUTEX_POINTERS.iter().map(|_| asm.label()).collect();
                let word_only = asm.label();
                for ((ops, _), &label) in FUTEX_POINTERS.iter().zip(&groups) {
                    for &op in *ops {
                        asm.push(insn(JEQ_K, 0, 1, op));
                        asm.ja(label);
                    }
                }
                asm.ja(word_only);
                for ((_, mask), &label) in FUTEX_POINTERS.iter().zip(&groups) {
                    asm.bind(label);
                    for i in (0..6).filter(|i| mask & (1 << i) != 0) {
                        check_arg(&mut asm, i, trap);
                    }
                    asm.ja(allow);
                }
                asm.bind(word_only);
                check_arg(&mut asm, 0, trap);
                asm.ja(allow);
            }
        }
    }
    asm.bind(allow);
    asm.push(insn(RET_K, 0, 0, SECCOMP_RET_ALLOW));
    asm.bind(trap);
    asm.push(insn(RET_K, 0, 0, SECCOMP_RET_TRAP | TRAP_MARKER));
    asm.finish()
}

/// What the program answers for one call (for tests: a classic BPF
/// interpreter of the instructions [`program`] uses).
#[cfg(test)]
pub fn run(code: &[Insn], nr: u32, arch: u32, ip: u64, args: [u64; 6]) -> u32 {
    let word = |off: u32| -> u32 {
        match off {
            OFF_NR => nr,
            OFF_ARCH => arch,
            8 => ip as u32,
            12 => (ip >> 32) as u32,
            o => {
                let i = ((o - 16) / 8) as usize;
                if (o - 16) % 8 == 0 {
                    args[i] as u32
                } else {
                    (args[i] >> 32) as u32
                }
            }
        }
    };
    let (mut pc, mut a) = (0usize, 0u32);
    loop {
        let i = code[pc];
        pc += 1;
        match i.code {
            LD_W_ABS => a = word(i.k),
            RSH_K => a >>= i.k,
            AND_K => a &= i.k,
            JA => pc += i.k as usize,
            JEQ_K => pc += if a == i.k { i.jt } else { i.jf } as usize,
            JGE_K => pc += if a >= i.k { i.jt } else { i.jf } as usize,
            RET_K => return i.k,
            other => panic!("opcode {other:#x} at {}", pc - 1),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const IP: u64 = 0x4800_0000_0019;
    const HERE: u64 = 0x7f00_1234_5678;
    const IN: u64 = far::FAR_BASE as u64 + 0x1234_5000;
    const OUT: u64 = 0x5555_5555_9000;
    const TRAP: u32 = SECCOMP_RET_TRAP | TRAP_MARKER;

    fn answer(nr: i64, args: [u64; 6]) -> u32 {
        run(&program(IP), nr as u32, AUDIT_ARCH_X86_64, HERE, args)
    }

    #[test]
    fn pointers_into_the_far_range_trap_and_others_pass() {
        let code = program(IP);
        assert!(code.len() < 4096, "{} instructions", code.len());
        assert_eq!(answer(libc::SYS_read, [3, IN, 10, 0, 0, 0]), TRAP);
        assert_eq!(
            answer(libc::SYS_read, [3, OUT, 10, 0, 0, 0]),
            SECCOMP_RET_ALLOW
        );
        // The count is not a pointer: a count that looks like one passes.
        assert_eq!(
            answer(libc::SYS_read, [3, OUT, IN, 0, 0, 0]),
            SECCOMP_RET_ALLOW
        );
        assert_eq!(answer(libc::SYS_newfstatat, [0, OUT, IN, 0, 0, 0]), TRAP);
        assert_eq!(answer(libc::SYS_getcwd, [IN, 100, 0, 0, 0, 0]), TRAP);
        // The edges of the range.
        let top = (far::FAR_BASE + far::FAR_LEN) as u64;
        assert_eq!(answer(libc::SYS_write, [1, top - 1, 1, 0, 0, 0]), TRAP);
        assert_eq!(
            answer(libc::SYS_write, [1, top, 1, 0, 0, 0]),
            SECCOMP_RET_ALLOW
        );
        assert_eq!(
            answer(libc::SYS_write, [1, far::FAR_BASE as u64 - 1, 1, 0, 0, 0]),
            SECCOMP_RET_ALLOW
        );
        // Address-range calls on region memory pass.
        assert_eq!(
            answer(libc::SYS_madvise, [IN, 4096, 4, 0, 0, 0]),
            SECCOMP_RET_ALLOW
        );
        assert_eq!(
            answer(libc::SYS_munmap, [IN, 4096, 0, 0, 0, 0]),
            SECCOMP_RET_ALLOW
        );
    }

    #[test]
    fn indirect_calls_trap_always_and_control_flow_never() {
        assert_eq!(answer(libc::SYS_writev, [1, OUT, 1, 0, 0, 0]), TRAP);
        assert_eq!(
            answer(libc::SYS_clone, [0, IN, IN, IN, IN, 0]),
            SECCOMP_RET_ALLOW
        );
        assert_eq!(answer(libc::SYS_rt_sigreturn, [IN; 6]), SECCOMP_RET_ALLOW);
        assert_eq!(
            answer(libc::SYS_io_uring_setup, [8, OUT, 0, 0, 0, 0]),
            SECCOMP_RET_ERRNO | libc::ENOSYS as u32
        );
    }

    #[test]
    fn private_futex_wakes_pass_and_waits_on_region_words_trap() {
        let wake = libc::FUTEX_WAKE | libc::FUTEX_PRIVATE_FLAG;
        let wait = libc::FUTEX_WAIT | libc::FUTEX_PRIVATE_FLAG;
        assert_eq!(
            answer(libc::SYS_futex, [IN, wake as u64, 1, 0, 0, 0]),
            SECCOMP_RET_ALLOW
        );
        assert_eq!(answer(libc::SYS_futex, [IN, wait as u64, 1, 0, 0, 0]), TRAP);
        assert_eq!(
            answer(libc::SYS_futex, [OUT, wait as u64, 1, 0, 0, 0]),
            SECCOMP_RET_ALLOW
        );
        // A shared wake follows the word into memory (get_user_pages).
        assert_eq!(
            answer(libc::SYS_futex, [IN, libc::FUTEX_WAKE as u64, 1, 0, 0, 0]),
            TRAP
        );
        // Registers a caller left as they were do not trap...
        assert_eq!(
            answer(libc::SYS_futex, [OUT, wait as u64, 1, 0, IN, IN]),
            SECCOMP_RET_ALLOW
        );
        // ... where the operation reads no memory through them,
        assert_eq!(
            answer(libc::SYS_futex, [OUT, wait as u64, 1, IN, 0, 0]),
            TRAP
        );
        let requeue = libc::FUTEX_CMP_REQUEUE | libc::FUTEX_PRIVATE_FLAG;
        assert_eq!(
            answer(libc::SYS_futex, [OUT, requeue as u64, 1, IN, 0, 0]),
            SECCOMP_RET_ALLOW
        );
        assert_eq!(
            answer(libc::SYS_futex, [OUT, requeue as u64, 1, 0, IN, 0]),
            TRAP
        );
    }

    #[test]
    fn calls_trap_for_their_pointers_only_never_for_what_they_ask() {
        // A program exec'd without zpage keeps the filter: setting SIGBUS's
        // action or blocking every signal must pass there.
        let act =
            |sig: i32, new: u64| answer(libc::SYS_rt_sigaction, [sig as u64, new, 0, 8, 0, 0]);
        assert_eq!(act(libc::SIGBUS, OUT), SECCOMP_RET_ALLOW);
        assert_eq!(act(libc::SIGSYS, OUT), SECCOMP_RET_ALLOW);
        assert_eq!(act(libc::SIGBUS, IN), TRAP);
        let mask = |how: i32, set: u64, old: u64| {
            answer(libc::SYS_rt_sigprocmask, [how as u64, set, old, 8, 0, 0])
        };
        assert_eq!(mask(libc::SIG_BLOCK, OUT, OUT), SECCOMP_RET_ALLOW);
        assert_eq!(mask(libc::SIG_BLOCK, IN, 0), TRAP);
        assert_eq!(mask(libc::SIG_BLOCK, 0, IN), TRAP);
        assert_eq!(
            answer(libc::SYS_execve, [OUT, OUT, OUT, 0, 0, 0]),
            SECCOMP_RET_ALLOW
        );
        assert_eq!(answer(libc::SYS_execve, [OUT, IN, OUT, 0, 0, 0]), TRAP);
    }

    #[test]
    fn the_trampoline_other_architectures_and_unknown_calls() {
        let code = program(IP);
        assert_eq!(
            run(
                &code,
                libc::SYS_read as u32,
                AUDIT_ARCH_X86_64,
                IP,
                [3, IN, 1, 0, 0, 0]
            ),
            SECCOMP_RET_ALLOW
        );
        // Same low word, other high word: not the trampoline.
        assert_eq!(
            run(
                &code,
                0,
                AUDIT_ARCH_X86_64,
                IP + (1 << 32),
                [3, IN, 1, 0, 0, 0]
            ),
            TRAP
        );
        assert_eq!(run(&code, 3, 0x4000_0003, HERE, [IN; 6]), SECCOMP_RET_ALLOW);
        assert_eq!(answer(1000, [0, 0, 0, 0, 0, IN]), TRAP);
        assert_eq!(answer(5000, [0, 0, 0, 0, IN, 0]), TRAP);
        assert_eq!(answer(5000, [0; 6]), SECCOMP_RET_ALLOW);
    }

    #[test]
    fn every_table_entry_behaves_as_its_rule_says() {
        let code = program(IP);
        for call in table::CALLS {
            let ask = |args| run(&code, call.nr, AUDIT_ARCH_X86_64, HERE, args);
            match rule_of(call) {
                Rule::Allow => assert_eq!(ask([IN; 6]), SECCOMP_RET_ALLOW, "{}", call.name),
                Rule::Trap => assert_eq!(ask([OUT; 6]), TRAP, "{}", call.name),
                Rule::Errno(_) => assert_ne!(ask([OUT; 6]) & SECCOMP_RET_ERRNO, 0),
                Rule::Check(mask) => {
                    assert_eq!(ask([OUT; 6]), SECCOMP_RET_ALLOW, "{}", call.name);
                    for i in 0..6 {
                        let mut args = [OUT; 6];
                        args[i] = IN;
                        let want = if mask & (1 << i) != 0 {
                            TRAP
                        } else {
                            SECCOMP_RET_ALLOW
                        };
                        assert_eq!(ask(args), want, "{} argument {i}", call.name);
                    }
                }
                Rule::Futex => {}
            }
        }
    }
}
