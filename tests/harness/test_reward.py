from cuda_agent.harness.reward import RewardSchedule, milestone


def test_failure_scores_minus_one_whatever_the_speed():
    assert milestone(False, 100.0, 100.0).reward == -1


def test_milestones_follow_the_paper():
    assert milestone(True, None, None).name == "correct"
    assert milestone(True, 1.04, 2.0).reward == 1          # not 5% faster than eager
    assert milestone(True, 1.05, 0.9).reward == 2
    assert milestone(True, 1.5, 1.049).reward == 2         # compile margin not met
    assert milestone(True, 1.5, 1.05).reward == 3


def test_schedule_and_margin_are_configurable():
    s = RewardSchedule(correct=0.5, faster_than_eager=1.0, faster_than_compile=4.0, margin=0.2)
    assert milestone(True, 1.1, 1.1, s).reward == 0.5
    m = milestone(True, 1.3, 1.25, s)
    assert m.reward == 4.0 and "1.20x" in m.detail
