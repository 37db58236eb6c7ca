//! The registration of each method's implementation: the one place that names them, above the
//! traits they implement (`method/mod.rs`) and the files that implement them.

use super::{TrainingMethod, band_mf, band_mf_filtered, dp_sgd, dp_sgd_individual, filtered_gd, non_private, plain_gd};
use crate::train::config::Method;

impl Method {
    /// The names, quoted, of the methods for which `can` holds ("\"filtered\" or
    /// \"sgd-filtered\""): what a capability message offers instead, derived from the methods.
    #[must_use]
    pub fn those_that(can: impl Fn(&dyn TrainingMethod) -> bool) -> String {
        let names: Vec<String> =
            Self::ALL.iter().filter(|m| can(m.training())).map(|m| format!("\"{}\"", m.name())).collect();
        match names.as_slice() {
            [] => String::new(),
            [one] => one.clone(),
            [init @ .., last] => format!("{} or {last}", init.join(", ")),
        }
    }

    /// What the method does: the registration of each name's implementation.
    #[must_use]
    pub fn training(self) -> &'static dyn TrainingMethod {
        match self {
            Method::Plain => &plain_gd::PlainGd,
            Method::Filtered => &filtered_gd::FilteredGd,
            Method::Sgd => &dp_sgd::DpSgd,
            Method::SgdFiltered => &dp_sgd_individual::DpSgdIndividual,
            Method::BandMf => &band_mf::BandMf,
            Method::BandMfFiltered => &band_mf_filtered::BandMfFiltered,
            Method::NonPrivate => &non_private::NonPrivateGd,
        }
    }

    /// The method in words, for run output.
    #[must_use]
    pub fn describe(self) -> &'static str {
        self.training().describe()
    }
}
