"""Files the gateway owns: outputs copied into the operator's storage, the download that
fetches them, uploads (``POST /v1/files``), file inputs, and the files service behind the
HTTP handlers (docs/files.md). ``gateway.storage`` is the storage port they write through."""
