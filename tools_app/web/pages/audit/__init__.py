"""The audit log's pages: every tool call across runs (`calls`), the tools index and a
tool's page with its versions (`tools`), and the tool page's Try it (`tryit`,
`tryit_form`)."""
