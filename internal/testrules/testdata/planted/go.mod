module example.com/planted

go 1.22
