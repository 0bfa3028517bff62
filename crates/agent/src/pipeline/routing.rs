//! Where an event goes: its data stream, `<type>-<dataset>-<namespace>`,
//! as Elastic's policies name it. Inputs read it from their settings;
//! outputs write to it.

/// `data_stream.{type,dataset,namespace}`: where the input's events go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DataStream {
    /// `logs` by default.
    pub kind: String,
    /// `generic` by default.
    pub dataset: String,
    /// `default` by default.
    pub namespace: String,
}

impl Default for DataStream {
    fn default() -> Self {
        DataStream {
            kind: "logs".into(),
            dataset: "generic".into(),
            namespace: "default".into(),
        }
    }
}
