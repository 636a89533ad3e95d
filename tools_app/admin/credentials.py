"""What the admin's forms share about credentials in stored configuration."""

# Header names that carry credentials; their values must come from the environment.
SECRET_HEADER_WORDS = ("authorization", "api-key", "apikey", "token", "secret", "cookie")
