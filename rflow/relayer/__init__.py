"""The embedded relayer: building, signing, pricing and following transactions."""
