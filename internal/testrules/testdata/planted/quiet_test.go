package planted

import "testing"

func TestRedact_attackForms(t *testing.T) {}

func TestMain(m *testing.M) { startThree(nil) }
