"""SGLang's own error vocabulary as a test set for the classifier (see README.md here)."""
