//! The `--help` text, built from [`FLAGS`].

use super::defs::FLAGS;

/// The `--help` text.
pub fn help_text() -> String {
    let mut out = format!(
        "virt-launcher {} - runs one KubeVirt VMI through libvirt and QEMU\n\n\
         Usage: virt-launcher --name NAME --namespace NAMESPACE [FLAGS]\n       \
         virt-launcher --vmi FILE [FLAGS]\n       \
         virt-launcher probe|freeze|unfreeze|ctl [FLAGS] ...\n\n\
         Flags take their value as --flag VALUE or --flag=VALUE (use the = form for a\n\
         value that starts with '-'); switches also take =true or =false.\n\
         DURATION is like 500ms, 90s, 5m, 1h or 4m30s (a plain number is seconds).\n\nFlags:\n",
        env!("CARGO_PKG_VERSION")
    );
    for flag in FLAGS {
        let mut names = String::new();
        if let Some(c) = flag.short {
            names.push_str(&format!("-{c}, "));
        }
        names.push_str("--");
        names.push_str(flag.long);
        if let Some(v) = flag.value_name() {
            names.push(' ');
            names.push_str(v);
        }
        out.push_str(&format!("  {names}\n"));
        let mut text = flag.help.to_string();
        if let Some(d) = flag.default_text() {
            text.push_str(&format!(" [default: {d}]"));
        }
        for line in wrap(&text, 72) {
            out.push_str(&format!("        {line}\n"));
        }
    }
    out.push_str("\nSubcommands (each with its own --help), talking to a running launcher:\n");
    for sub in super::subcommands::SUBCOMMANDS {
        out.push_str(&format!("  {:<10} {}\n", sub.name, sub.summary));
    }
    out.push_str(
        "\nThe command socket speaks line-delimited JSON; see man virt-launcher and docs/protocol.md.\n",
    );
    out
}

pub(super) fn wrap(text: &str, width: usize) -> Vec<String> {
    let mut lines = Vec::new();
    let mut current = String::new();
    for word in text.split_whitespace() {
        if !current.is_empty() && current.len() + 1 + word.len() > width {
            lines.push(std::mem::take(&mut current));
        }
        if !current.is_empty() {
            current.push(' ');
        }
        current.push_str(word);
    }
    if !current.is_empty() {
        lines.push(current);
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn help_lists_every_flag_with_its_default() {
        // Defaults may be wrapped across lines; compare with single spaces.
        let help = help_text().split_whitespace().collect::<Vec<_>>().join(" ");
        for flag in FLAGS {
            assert!(help.contains(&format!("--{}", flag.long)), "{}", flag.long);
            if let Some(d) = flag.default_text() {
                assert!(help.contains(&format!("[default: {d}]")), "{}", flag.long);
            }
        }
    }

    #[test]
    fn help_lines_fit_a_terminal() {
        for line in help_text().lines() {
            assert!(line.chars().count() <= 100, "{line}");
        }
    }
}
