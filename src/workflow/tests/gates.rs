//! Command gates against a throwaway git repository with a local bare remote.
