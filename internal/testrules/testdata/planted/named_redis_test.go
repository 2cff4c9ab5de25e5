package planted

import "testing"

func TestAttack3_planted(t *testing.T) { startThree(t) }

func TestRedis_Attack4_planted(t *testing.T) { startThree(t) }
