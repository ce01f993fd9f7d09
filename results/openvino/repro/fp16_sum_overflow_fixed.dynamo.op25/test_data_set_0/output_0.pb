Bout0Jª`D%
D