"""The run stage (one runtime's environment, no torch, no pandas): every artifact × probe × column to a verdict."""
