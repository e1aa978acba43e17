//! The budget's options as command-line flags, made from the one option
//! list (`zpage_region::BUDGET_OPTIONS`): each option is `--flag VALUE`
//! (a switch takes none) and its help is the list's. A new option in the
//! list is a new flag here with no code.
//!
//! Values are checked by the list's rules in [`BudgetFlags::options`], not
//! by clap: `zpage run` refuses a bad value as its own failure (exit 125,
//! as `env` and `timeout` do), where clap would exit 2.

use zpage_region::{BudgetOption, BudgetOptions, OptionError, Spelling, BUDGET_OPTIONS};

/// The budget options given on the command line, as given.
#[derive(Clone, Debug, Default)]
pub struct BudgetFlags {
    given: Vec<(&'static BudgetOption, String)>,
}

impl BudgetFlags {
    /// The options, each read by its type's rules; the error names the flag.
    /// `zpage run` reads what was given through these, not the flags.
    pub fn options(&self) -> Result<BudgetOptions, OptionError> {
        let mut options = BudgetOptions::new();
        for (option, text) in &self.given {
            options.set(option.name, text, Spelling::Flag)?;
        }
        Ok(options)
    }
}

impl clap::FromArgMatches for BudgetFlags {
    fn from_arg_matches(matches: &clap::ArgMatches) -> Result<Self, clap::Error> {
        let given = BUDGET_OPTIONS
            .iter()
            .filter_map(|option| {
                let text = if option.switch {
                    matches.get_flag(option.name).then(|| "true".to_string())
                } else {
                    matches.get_one::<String>(option.name).cloned()
                };
                text.map(|text| (option, text))
            })
            .collect();
        Ok(BudgetFlags { given })
    }

    fn update_from_arg_matches(&mut self, matches: &clap::ArgMatches) -> Result<(), clap::Error> {
        *self = Self::from_arg_matches(matches)?;
        Ok(())
    }
}

impl clap::Args for BudgetFlags {
    fn augment_args(mut command: clap::Command) -> clap::Command {
        for option in BUDGET_OPTIONS {
            let help = option.help.trim();
            let mut arg = clap::Arg::new(option.name)
                .long(option.flag())
                .help(help.lines().next().unwrap_or(help))
                .long_help(help)
                .help_heading("Budget options");
            arg = if option.switch {
                arg.action(clap::ArgAction::SetTrue)
            } else {
                arg.value_name(option.syntax)
            };
            command = command.arg(arg);
        }
        command
    }

    fn augment_args_for_update(command: clap::Command) -> clap::Command {
        Self::augment_args(command)
    }
}
