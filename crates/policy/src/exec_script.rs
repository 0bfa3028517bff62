//! Where an `exec` input would run code built from a Pod's values.
//!
//! A Pod author controls its annotations, labels, hints and names. Put
//! into a shell string (`sh -c 'echo ${kubernetes.annotations.x}'`) such a
//! value is code: `$(…)`, `;`, a quote. It is safe only as a separate
//! argument (`sh -c 'echo "$1"' sh ${kubernetes.annotations.x}`) or an
//! environment value. This finds, without I/O, the places of a `command`
//! that are code or choose the program: the program itself (argv 0) and
//! the script a shell (`-c`) or an interpreter (`-c`, `-e`) runs. `check`
//! warns about them; the agent does not run such an input.

use crate::dynamic;
use crate::error::Pos;
use crate::model::{Node, NodeKind};

/// Programs whose `-c` option takes a script (also in a cluster, `-ec`).
const SHELLS: [&str; 9] = [
    "sh", "bash", "dash", "zsh", "ksh", "mksh", "ash", "fish", "busybox",
];

/// Interpreters and the options after which their code comes.
const INTERPRETERS: [(&str, &[&str]); 8] = [
    ("python", &["-c"]),
    ("python3", &["-c"]),
    ("perl", &["-e", "-E"]),
    ("ruby", &["-e"]),
    ("node", &["-e", "--eval", "-p", "--print"]),
    ("php", &["-r"]),
    ("awk", &[]),
    ("lua", &["-e"]),
];

/// A place of an `exec` command where a Pod-controlled value would be
/// code, with the variable and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CodeFromPod {
    /// Where the string starts.
    pub pos: Pos,
    /// The variable read, e.g. `kubernetes.annotations.x`.
    pub var: String,
    /// What the string is: "the program", "the shell script", …
    pub what: &'static str,
}

impl CodeFromPod {
    /// The message for `check` and `/status`.
    pub fn message(&self) -> String {
        format!(
            "`command` builds {} from ${{{}}}, a value a Pod author controls (line {} column {}): it would run as code",
            self.what, self.var, self.pos.line, self.pos.column
        )
    }

    /// How to fix it.
    pub fn hint() -> &'static str {
        "pass the value as a separate argument (`[sh, -c, 'echo \"$1\"', sh, '${kubernetes.…}']`) or in `env` and read it as \"$NAME\""
    }
}

/// The first place where `input`, an `exec` input, makes code or the
/// program from a variable of one Pod or container of `provider` (not
/// its node's, which the operator's node carries). `None` for other
/// inputs and for safe commands.
pub fn code_from_pod(input: &Node, provider: &str, default_provider: &str) -> Option<CodeFromPod> {
    if input.get("type").and_then(Node::as_str) != Some("exec") {
        return None;
    }
    let command = input.get("command")?;
    let NodeKind::List(argv) = &command.kind else {
        // The whole argv from one variable: the program is chosen by it.
        return pod_var(command, provider, default_provider).map(|var| CodeFromPod {
            pos: command.pos,
            var,
            what: "the program and its arguments",
        });
    };
    for (node, what) in code_places(argv) {
        if let Some(var) = pod_var(node, provider, default_provider) {
            return Some(CodeFromPod {
                pos: node.pos,
                var,
                what,
            });
        }
    }
    None
}

/// The arguments of `argv` that are code: the program, and the script a
/// shell or an interpreter is given (after `env` and its assignments, and
/// after `busybox`'s applet name).
fn code_places(argv: &[Node]) -> Vec<(&Node, &'static str)> {
    let mut out = Vec::new();
    let mut i = 0;
    let program_of = |n: &Node| {
        n.as_str()
            .map(|s| s.rsplit('/').next().unwrap_or(s).to_string())
    };
    // `env [-i] [NAME=value…] program …`
    if argv.first().and_then(program_of).as_deref() == Some("env") {
        out.push((&argv[0], "the program"));
        i = 1;
        while argv
            .get(i)
            .and_then(Node::as_str)
            .is_some_and(|a| a.starts_with('-') || a.contains('='))
        {
            i += 1;
        }
    }
    let Some(program) = argv.get(i) else {
        return out;
    };
    out.push((program, "the program"));
    let mut name = program_of(program).unwrap_or_default();
    i += 1;
    if name == "busybox"
        && let Some(applet) = argv.get(i)
    {
        out.push((applet, "the program"));
        name = program_of(applet).unwrap_or_default();
        i += 1;
    }
    let args = argv.get(i..).unwrap_or(&[]);
    if SHELLS.contains(&name.as_str()) {
        let mut code_next = false;
        for a in args {
            let text = a.as_str().unwrap_or("");
            if code_next && !text.starts_with('-') {
                out.push((a, "the shell script"));
                break;
            }
            if text.starts_with('-')
                && !text.starts_with("--")
                && text[1..].chars().all(|c| c.is_ascii_alphabetic())
                && text.contains('c')
            {
                code_next = true;
            }
        }
    } else if let Some((_, flags)) = INTERPRETERS.iter().find(|(n, _)| {
        name == *n
            || name
                .strip_prefix(n)
                .is_some_and(|v| v.chars().all(|c| c.is_ascii_digit() || c == '.'))
    }) {
        if flags.is_empty() {
            // awk: its first argument that is not an option is the program.
            if let Some(a) = args
                .iter()
                .find(|a| !a.as_str().unwrap_or("").starts_with('-'))
            {
                out.push((a, "the script"));
            }
        } else {
            for w in args.windows(2) {
                if flags.contains(&w[0].as_str().unwrap_or("")) {
                    out.push((&w[1], "the script"));
                }
            }
        }
    }
    out
}

/// The first variable of one Pod or container of `provider` that the
/// string `node` reads.
fn pod_var(node: &Node, provider: &str, default_provider: &str) -> Option<String> {
    dynamic::own_var_in(node.as_str()?, provider, default_provider)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Policy;

    fn found(command: &str) -> Option<(String, &'static str)> {
        let yaml = format!("inputs:\n  - type: exec\n    command: {command}\n");
        let p = Policy::parse(&yaml, "p.yml").expect("parses");
        code_from_pod(&p.inputs()[0], "kubernetes", "env").map(|c| (c.var, c.what))
    }

    #[test]
    fn a_pods_value_inside_a_script_or_as_the_program_is_found() {
        let script = "the shell script";
        for (cmd, var, what) in [
            (
                "[sh, -c, 'echo ${kubernetes.annotations.x}']",
                "kubernetes.annotations.x",
                script,
            ),
            (
                "[/bin/bash, -ec, 'curl ${kubernetes.hints.app.url}']",
                "kubernetes.hints.app.url",
                script,
            ),
            (
                "[env, A=1, sh, -c, 'x ${kubernetes.labels.app}']",
                "kubernetes.labels.app",
                script,
            ),
            (
                "[busybox, sh, -c, 'x ${kubernetes.pod.name}']",
                "kubernetes.pod.name",
                script,
            ),
            (
                "[python3, -c, 'print(\"${kubernetes.annotations.y}\")']",
                "kubernetes.annotations.y",
                "the script",
            ),
            (
                "['${kubernetes.annotations.cmd}', -v]",
                "kubernetes.annotations.cmd",
                "the program",
            ),
            (
                "'${kubernetes.annotations.argv}'",
                "kubernetes.annotations.argv",
                "the program and its arguments",
            ),
        ] {
            assert_eq!(found(cmd), Some((var.to_string(), what)), "{cmd}");
        }
    }

    #[test]
    fn separate_arguments_node_values_and_other_providers_are_fine() {
        for cmd in [
            // The value is `$1`: an argument, never code.
            "[sh, -c, 'echo \"$1\"', sh, '${kubernetes.annotations.x}']",
            "[curl, '${kubernetes.annotations.url}']",
            // The node's values are the operator's.
            "[sh, -c, 'echo ${kubernetes.node.name}']",
            "[sh, -c, 'echo ${env.HOME} ${host.name}']",
            "[sh, -c, 'echo $${kubernetes.annotations.x}']",
            "[date]",
        ] {
            assert_eq!(found(cmd), None, "{cmd}");
        }
        let p = Policy::parse(
            "inputs:\n  - type: filestream\n    command: [sh, -c, '${kubernetes.pod.name}']\n",
            "p.yml",
        )
        .expect("parses");
        assert_eq!(code_from_pod(&p.inputs()[0], "kubernetes", "env"), None);
    }
}
