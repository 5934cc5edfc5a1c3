"""The operator's side effects: the API client, the executor of a Decision, the fence."""
