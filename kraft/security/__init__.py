"""Security: TLS contexts, credentials, principals and what each may do (issue 8)."""
