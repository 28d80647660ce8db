//! What generating or rendering CRDs can fail with.

/// Generating or rendering CRDs failed.
#[derive(Debug, thiserror::Error)]
pub enum CrdGenError {
    /// A schema is not a valid `JSONSchemaProps`.
    #[error("schema of {what} is not a valid OpenAPI v3 schema: {source}")]
    Schema {
        /// Which schema.
        what: String,
        /// The decoding error.
        #[source]
        source: serde_json::Error,
    },
    /// A resource could not be rendered as YAML.
    #[error("cannot render {path} as YAML: {source}")]
    Yaml {
        /// The file being rendered.
        path: String,
        /// The serializer error.
        #[source]
        source: serde_saphyr::SerializeError,
    },
}
