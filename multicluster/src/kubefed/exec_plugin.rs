//! Whether a KubeFedCluster's exec credential plugin may run: running one is running a
//! command with the caller's rights (the controller-manager's, or a user's for `flotilla
//! diff`), so only commands under a directory the operator named
//! ([`super::client::ClientInputs::with_exec_plugin_dir`], the controller-manager's
//! `--exec-plugin-dir`) are run — none by default. A refused plugin is the cluster's
//! ConfigMalformed message.

use std::path::{Component, Path};

use flotilla_api::core::ExecPlugin;

/// `Ok` when `plugin`'s command is an absolute path inside `dir` (no `..`); else why not.
pub fn allowed(plugin: &ExecPlugin, dir: Option<&Path>) -> Result<(), String> {
    let Some(dir) = dir else {
        return Err(format!(
            "spec.exec names the exec credential plugin {:?}, but the controller-manager runs \
             no exec plugin (start it with --exec-plugin-dir DIR holding the plugin)",
            plugin.command
        ));
    };
    let command = Path::new(&plugin.command);
    let plain = command
        .components()
        .all(|c| !matches!(c, Component::ParentDir | Component::CurDir));
    if !command.is_absolute() || !plain || !command.starts_with(dir) {
        return Err(format!(
            "spec.exec.command {:?} is not an absolute path inside the controller-manager's \
             --exec-plugin-dir {}",
            plugin.command,
            dir.display()
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plugin(command: &str) -> ExecPlugin {
        ExecPlugin {
            command: command.into(),
            ..ExecPlugin::default()
        }
    }

    #[test]
    fn no_plugin_runs_without_a_plugin_directory() {
        let refused = allowed(&plugin("/opt/plugins/token"), None).expect_err("refused");
        assert!(refused.contains("--exec-plugin-dir"), "{refused}");
    }

    #[test]
    fn only_absolute_commands_inside_the_directory_run() {
        let dir = Some(Path::new("/opt/plugins"));
        assert!(allowed(&plugin("/opt/plugins/token"), dir).is_ok());
        for bad in [
            "token",
            "/bin/sh",
            "/opt/plugins/../../bin/sh",
            "/opt/pluginsx/t",
        ] {
            assert!(allowed(&plugin(bad), dir).is_err(), "{bad}");
        }
    }
}
